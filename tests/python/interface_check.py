"""Compares a class's method signatures with an abstract class in an engine's source,
without importing the engine (vLLM and SGLang import torch): the source file is
parsed with ast. Used by test_vllm.py and test_sglang.py when KVBM_VLLM_SOURCE /
KVBM_SGLANG_SOURCE name an unpacked wheel (a directory holding vllm/ or sglang/)."""

import ast
import inspect


def abstract_interface(path, class_name):
    """{method: ([positional parameter names], is_abstract)} of `class_name` in `path`."""
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            out = {}
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("_") or (
                        isinstance(f, ast.FunctionDef) and f.name == "__init__"):
                    names = [a.arg for a in f.args.args]
                    abstract = any(getattr(d, "id", getattr(d, "attr", None)) == "abstractmethod"
                                   for d in f.decorator_list)
                    out[f.name] = (names, abstract, [a.arg for a in f.args.kwonlyargs])
            return out
    raise AssertionError(f"{class_name} not found in {path}")


def mismatches(cls, interface, methods):
    """The methods of `methods` whose positional parameters differ from the interface's."""
    bad = []
    for name in methods:
        theirs, _, _ = interface[name]
        ours = [p.name for p in inspect.signature(getattr(cls, name)).parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY)]
        if ours != theirs:
            bad.append(f"{name}: ours {ours}, theirs {theirs}")
    return bad
