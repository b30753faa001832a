"""The discrete-event engine: the loop (``loop.run_events``) pops one event at a time and
hands it to a handler (``handlers``: arrival, admission, routing, queued; ``step``: an
engine step of one instance).  All state lives in a ``schema.State``."""
