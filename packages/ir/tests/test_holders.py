"""lazax.ir.private_parameters: which inputs nothing but the graph can reach.

Payloads are plain objects here (the executor's are device buffers); "holding" is any
Python reference, as in the executor: a list standing for a storage or a user."""

from collections import Counter

from lazax import ir

F32 = ir.TensorSpec((4,), "float32")


class Buffer:
    """A payload; only its identity matters."""


def leaf():
    return ir.device_data(F32, Buffer())


def add(a, b):
    return ir.Node("aten::add.Tensor", (a, b), ((("%", 0), ("%", 1)), ()), (F32,))


def split(a):
    """A two-output node; returns its outputs (the node and a Value)."""
    return ir.Node("aten::split", (a,), ((("%", 0),), ()), (F32, F32)).outputs


def private(roots, dropped_extra=()):
    """``private_parameters`` as the executor calls it: the roots list and each root's
    own holder (here, the test's variable for it: one per root) are dropped."""
    graph = ir.collect(roots)
    dropped = Counter(map(id, roots))  # the roots list
    dropped.update(map(id, roots))  # the variable that stands for each root's storage
    dropped.update(map(id, dropped_extra))
    return ir.private_parameters(graph, dropped)


def test_reference_counts_are_trusted_on_this_interpreter():
    assert ir.refcounts_reliable()
    obj = object()
    assert ir.holder_count(obj) == 1
    held = [obj, obj]
    assert ir.holder_count(obj) == 3
    del held

    def passed_down(o):  # the caller's variable and this parameter
        return ir.holder_count(o, calls=2)

    assert passed_down(obj) == 2
    other = object()
    assert ir.holder_counts([obj, other, obj]) == [2, 1, 2]  # obj: here and twice in the list


def test_an_input_only_the_graph_reads_is_private_and_a_held_one_is_not():
    a, b = leaf(), leaf()
    storage_of_b = [b]  # b is still some tensor's value
    root = add(a, b)
    del a, b
    assert private([root]) == [0]
    del storage_of_b


def test_a_payload_two_leaves_share_is_not_private():
    a = leaf()
    twin = ir.device_data(F32, a.data)  # a second storage over the same buffer
    root = add(a, leaf())
    del a
    assert private([root]) == [1]
    del twin


def test_pending_ir_outside_the_graph_holds_every_input_under_it():
    a, b = leaf(), leaf()
    shared = add(a, b)
    root = add(shared, shared)
    kept = [add(shared, shared)]  # another tensor's pending IR over ``shared``
    del a, b, shared
    assert private([root]) == []
    kept.clear()
    assert private([root]) == [0, 1]


def test_what_the_caller_drops_is_not_a_holder():
    a = leaf()
    root = add(a, a)
    storage = [root]  # the storage this root's result will replace
    del a
    assert private([root]) == []
    assert private([root], dropped_extra=storage) == [0]


def test_value_objects_of_multi_output_nodes():
    a = leaf()
    first, second = split(a)
    root = add(first, second)
    del a, first
    assert private([root]) == []  # ``second`` (a Value) is still held here
    del second
    assert private([root]) == [0]
    a = leaf()
    outputs = split(a)
    value = outputs[1]
    del a
    assert private([value]) == []  # ``outputs`` holds the node itself (output 0)
    del outputs
    assert private([value]) == [0]
