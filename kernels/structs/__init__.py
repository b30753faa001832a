"""Array-backed data structures shared by the kernels, one implementation each: the event
heap, doubly linked lists, open-addressing row tables, merge sort, key counting, column-wise
reads of record tables and the 64-bit mixing function behind every hash."""
