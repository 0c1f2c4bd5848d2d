"""The services' import graph has no circle at module level (issue 27).

A circle among services hides which module owns what: the launch verb once held the box's file layout, so
every watcher imported the verb and the verb imported them back inside a function. Counted here: every import
grimp finds (the graph import-linter checks its contracts on), those under TYPE_CHECKING and inside functions
included, since a deferred import that dodges a circle is still the circle. grimp ships with import-linter
(the dev extra); the strongly connected components are Tarjan's, written out so the test needs nothing more.
"""

from __future__ import annotations

import grimp

SERVICES = "remote_gpu_trainer.services."


def services_graph() -> dict[str, set[str]]:
    """Each module under services/ and the services modules it imports."""
    graph = grimp.build_graph("remote_gpu_trainer", cache_dir=None)
    return {module: {m for m in graph.find_modules_directly_imported_by(module) if m.startswith(SERVICES)}
            for module in sorted(graph.modules) if module.startswith(SERVICES)}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_component_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "d"}, "e": set()}
    assert sorted(strongly_connected(graph)) == [["a", "b", "c"], ["d"], ["e"]]


def test_no_import_cycle_among_services() -> None:
    graph = services_graph()
    assert len(graph) > 40  # the walk found the services, not an empty package
    cycles = [c for c in strongly_connected(graph) if len(c) > 1 or c[0] in graph[c[0]]]
    shown = []
    for modules in cycles:
        edges = [f"{a.removeprefix(SERVICES)} -> {b.removeprefix(SERVICES)}"
                 for a in modules for b in sorted(graph[a]) if b in modules]
        shown.append(", ".join(m.removeprefix(SERVICES) for m in modules) + "\n    " + "\n    ".join(edges))
    assert not cycles, "import cycles among services:\n" + "\n".join(shown)
