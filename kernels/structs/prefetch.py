"""``prefetch(table, row)``: ask the CPU to start loading a table row into cache now.

The engine's costliest instructions are loads of rows it has not touched for a long time:
the KV block at the head of a free list (released long ago, by design of an LRU list),
the blocks of a request being released.  Where the row needed *next* is known early
(the new head of the free list, the next blocks of a release walk), a prefetch lets
the memory access overlap with other work.  It changes no value; interpreted
(NUMBA_DISABLE_JIT=1) it does nothing.
"""

from numba import config, types
from numba.core import cgutils
from numba.extending import intrinsic

if config.DISABLE_JIT:

    def prefetch(table, row):
        """No-op when interpreted."""
        return None

else:
    from llvmlite import ir

    @intrinsic
    def prefetch(typingctx, table, row):
        """llvm.prefetch(read, high locality) of ``table[row]`` (a 1-D array)."""
        if not isinstance(table, types.Array) or table.ndim != 1 or not isinstance(row, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
            builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
            return context.get_dummy_value()

        return types.void(table, row), codegen
