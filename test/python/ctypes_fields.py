"""A helper for the CPU tests that check a packed struct.Struct against its ctypes declaration."""
import ctypes


def flatten(struct):
    """Every scalar field of a ctypes struct, in declaration order, nested structs expanded;
    pointers as addresses, null as 0."""
    values = []
    for name, _ in struct._fields_:
        value = getattr(struct, name)
        if isinstance(value, ctypes.Structure):
            values.extend(flatten(value))
        elif isinstance(value, int) or value is None:
            values.append(value or 0)
        else:  # a pointer field
            values.append(ctypes.cast(value, ctypes.c_void_p).value or 0)
    return values
