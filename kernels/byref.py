"""``by_ref(st)``: the State record passed to helpers by reference.

numba passes a NamedTuple by value, flattened into its arrays' fields: the State's ~55
arrays are ~360 machine words, pushed on the stack for every helper call that LLVM does
not inline.  On the 100K x 16 benchmark those pushes took more than half of the kernel
time.  ``by_ref`` stores the record once in the calling kernel's stack frame and hands
out a pointer to it: a helper call then passes one word, and ``ref.reqs`` (any field, by
name, as on the record) loads the field through the pointer.

The reference is read-only and valid while the function that made it runs: call
``by_ref`` in the kernel itself (e.g. ``run_events``) and pass the reference down --
helpers receive it as an argument and never keep it (they cannot: the tables hold
numbers only).
Interpreted (``NUMBA_DISABLE_JIT=1``) ``by_ref`` returns the record itself, which has
the same attributes.
"""

from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed
from numba.core.typing.templates import AttributeTemplate
from numba.extending import infer_getattr, intrinsic, lower_getattr_generic, models, overload, register_model


def by_ref(record):
    """A read-only reference to ``record`` (a NamedTuple) with the same attributes."""
    return record


class RecordRef(types.Type):
    """Pointer to a NamedTuple value in the creating kernel's stack frame."""

    def __init__(self, record_type):
        self.dtype = record_type  # (the name PointerModel reads)
        super().__init__(name=f"RecordRef({record_type})")


register_model(RecordRef)(models.PointerModel)


@infer_getattr
class _RecordRefAttributes(AttributeTemplate):
    key = RecordRef

    def generic_resolve(self, typ, attr):
        if attr in typ.dtype.fields:
            return typ.dtype.types[typ.dtype.fields.index(attr)]
        return None


@lower_getattr_generic(RecordRef)
def _record_ref_getattr(context, builder, typ, val, attr):
    pos = typ.dtype.fields.index(attr)
    field_type = typ.dtype.types[pos]
    data = builder.load(cgutils.gep_inbounds(builder, val, 0, pos))
    # the slot never changes after by_ref stored it: LLVM may keep the field in registers
    # across stores into the arrays (which it cannot otherwise prove do not overlap it)
    data.set_metadata("invariant.load", builder.module.add_metadata([]))
    value = context.data_model_manager[field_type].from_data(builder, data)
    return impl_ret_borrowed(context, builder, field_type, value)


@intrinsic
def _store_in_frame(typingctx, record):
    if not isinstance(record, types.BaseNamedTuple):
        return None

    def codegen(context, builder, sig, args):
        model = context.data_model_manager[record]
        slot = cgutils.alloca_once(builder, model.get_data_type())  # in the entry block: one per kernel call
        builder.store(model.as_data(builder, args[0]), slot)
        return slot

    return RecordRef(record)(record), codegen


@overload(by_ref, inline="always")  # (inlined in numba IR: the slot must be in the caller's frame)
def _by_ref(record):
    if isinstance(record, types.BaseNamedTuple):
        return lambda record: _store_in_frame(record)
    return None
