"""Array-backed data structures shared by the kernels, one implementation each: the event
heap, doubly linked lists, open-addressing row tables, merge sort, key counting and the
64-bit mixing function behind every hash."""
