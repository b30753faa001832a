"""A deterministic stand-in for OpenEvolve's LLM (``LLMModelConfig.init_client``): it
answers every prompt with a full rewrite of the YAML policy -- least-loaded routing when
the prompt shows the bad seed (always-busiest), weighted routing otherwise.  A module of
its own: OpenEvolve's worker processes import the factory by name."""

BETTER = "routing: least-loaded\nscheduler: sjf\n"
OTHER = "routing:\n  type: weighted\n  params:\n    scorers: {queue-depth: 2, kv-utilization: 1}\n"


class FakeLLM:
    def __init__(self, model: str = "fake"):
        self.model = model

    async def generate(self, prompt: str, **kwargs) -> str:
        return self._answer(prompt)

    async def generate_with_context(self, system_message: str, messages: list, **kwargs) -> str:
        return self._answer("\n".join(str(m.get("content", "")) for m in messages))

    @staticmethod
    def _answer(prompt: str) -> str:
        body = BETTER if "always-busiest" in prompt else OTHER
        return f"Here is the improved policy.\n```yaml\n# EVOLVE-BLOCK-START\n{body}# EVOLVE-BLOCK-END\n```\n"


def init_client(model_cfg):
    return FakeLLM(getattr(model_cfg, "name", "fake") or "fake")
