"""Helpers for the CPU tests that look inside torch.compile's graphs: a backend that records the
graphs dynamo and AOTAutograd hand it, and the call targets of a graph."""
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd


def recording_backend(graphs):
    """A torch.compile backend that appends each graph to graphs["dynamo"], graphs["forward"] or
    graphs["backward"] and runs it as given."""
    def compiler(kind):
        def record(gm, example_inputs):
            graphs[kind].append(gm)
            return make_boxed_func(gm.forward)
        return record

    def backend(gm, example_inputs):
        graphs["dynamo"].append(gm)
        return aot_autograd(fw_compiler=compiler("forward"),
                            bw_compiler=compiler("backward"))(gm, example_inputs)
    return backend


def call_targets(gm):
    """The targets of gm's call_function nodes, as strings."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
