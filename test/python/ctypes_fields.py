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


def assert_format_matches(fmt, cls):
    """fmt (a struct.Struct) packs the fields of ctypes struct `cls` in order: same size, and
    distinct values packed into a `cls` read back field by field."""
    assert fmt.size == ctypes.sizeof(cls)
    values = [(1000 + i) if code in "qiI" else (1 << 40) + 16 * i
              for i, code in enumerate(fmt.format.lstrip("<"))]
    struct = cls()
    fmt.pack_into(struct, 0, *values)
    assert flatten(struct) == values
