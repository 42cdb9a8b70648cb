"""Every public name of the SDK is documented: each name of ``bap.__all__`` and the public methods of
its classes have a docstring, a constant or type alias has an attribute docstring (a string right
after the assignment) or a ``#:`` comment, and each field of a TypedDict has a ``#:`` comment (a
``#`` comment in the functional form). The generated names take theirs from the spec's
descriptions, which ``make generate`` requires. Read from the source with ``ast``, not at run time:
attribute docstrings and field comments exist only there."""

import ast
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bap  # noqa: E402

PKG = os.path.dirname(os.path.abspath(bap.__file__))


def undocumented(source, filename="<source>"):
    """Returns the names defined at the top level of source whose documentation is missing,
    with their members, as "name" or "name.member" strings, keyed by the top-level name."""
    tree = ast.parse(source, filename)
    lines = source.splitlines()

    def comment_above(node, marker):
        i = node.lineno - 2  # the line before node, 0-based
        return i >= 0 and lines[i].strip().startswith(marker)

    def string_after(body, i):
        nxt = body[i + 1] if i + 1 < len(body) else None
        return isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)

    missing = {}
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            missing[node.name] = [] if ast.get_docstring(node) else [node.name]
        elif isinstance(node, ast.ClassDef):
            out = [] if ast.get_docstring(node) else [node.name]
            typed_dict = any(isinstance(b, ast.Name) and b.id == "TypedDict" for b in node.bases)
            for j, member in enumerate(node.body):
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if not member.name.startswith("_") and not ast.get_docstring(member):
                        out.append(f"{node.name}.{member.name}")
                elif typed_dict and isinstance(member, ast.AnnAssign) and isinstance(member.target, ast.Name):
                    if not comment_above(member, "#:") and not string_after(node.body, j):
                        out.append(f"{node.name}.{member.target.id}")
            missing[node.name] = out
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if not isinstance(t, ast.Name):
                    continue
                out = [] if string_after(tree.body, i) or comment_above(node, "#:") else [t.id]
                call = node.value
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "TypedDict":
                    fields = call.args[1] if len(call.args) > 1 else None
                    for key in getattr(fields, "keys", []):
                        if isinstance(key, ast.Constant) and not comment_above(key, "#"):
                            out.append(f"{t.id}.{key.value}")
                missing[t.id] = out
    return missing


class DocsTest(unittest.TestCase):
    def test_every_public_name_is_documented(self):
        found = {}
        for name in sorted(os.listdir(PKG)):
            if name.endswith(".py"):
                path = os.path.join(PKG, name)
                with open(path, encoding="utf-8") as f:
                    for k, v in undocumented(f.read(), path).items():
                        found.setdefault(k, v)
        self.assertGreater(len(bap.__all__), 100)
        problems = []
        for name in bap.__all__:
            if name not in found:
                problems.append(f"{name}: no definition found in {PKG}")
            else:
                problems.extend(found[name])
        self.assertEqual(problems, [], "public names without documentation")

    def test_the_check_can_fail(self):
        source = '''
class Doc(TypedDict):
    """Documented."""

    #: Documented.
    a: int
    b: int


class Plain:
    def m(self):
        pass

    def _private(self):
        pass


def f():
    pass


K = 1

#: Documented.
L = 2

M = 3
"""Documented."""

F = TypedDict(
    "F",
    {
        # Documented.
        "x": int,
        "y": int,
    },
)
'''
        got = sorted(m for v in undocumented(source).values() for m in v)
        self.assertEqual(got, sorted(["Doc.b", "Plain", "Plain.m", "f", "K", "F", "F.y"]))


if __name__ == "__main__":
    unittest.main()
