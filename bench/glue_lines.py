"""The glue a user writes for one fine-tuning trial (issue 48): a Hugging
Face causal LM, a text file, a 90/10 split, evaluation every 100 steps, the
trained weights back for from_pretrained. Counts the lines of code (not
blank, not comments, not docstrings) of each way of doing it that this
repository holds, and prints a table:

  tcc             bench/glue/tcc_loop.sh: README's loop, five commands
                  (examples/hf_export.py, which ships with tcc, does the
                  export; counted apart: what a user writes for a model it
                  does not fit)
  HF Trainer      bench/glue/hf_trainer.py: the same trial with
                  transformers' Trainer

Both scripts run: `bash bench/glue/tcc_loop.sh MODEL TOK corpus.txt OUT 12
--target=cpu` and `python bench/glue/hf_trainer.py MODEL TOK corpus.txt OUT
12` on a local model and tokenizer folder (docs/exporting.md).

  python bench/glue_lines.py
"""
import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def python_lines(path):
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src)
    doc = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node):
            d = node.body[0]
            doc.update(range(d.lineno, d.end_lineno + 1))
    return sum(1 for i, line in enumerate(src.splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and i not in doc)


def shell_commands(path):
    """Commands after the set-up lines (set, variables, here=): one per
    logical line (a trailing backslash continues it)."""
    n, cont = 0, False
    for line in open(path, encoding="utf-8"):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not cont and not s.startswith(("set ", "model=", "here=")):
            n += 1
        cont = s.endswith("\\")
    return n


def main():
    rows = [
        ("tcc (README's loop)", "%d commands" % shell_commands(os.path.join(ROOT, "bench/glue/tcc_loop.sh")),
         "bench/glue/tcc_loop.sh"),
        ("tcc, writing the export too", "+%d lines of Python" % python_lines(os.path.join(ROOT, "examples/hf_export.py")),
         "examples/hf_export.py"),
        ("HF Trainer", "%d lines of Python" % python_lines(os.path.join(ROOT, "bench/glue/hf_trainer.py")),
         "bench/glue/hf_trainer.py"),
    ]
    print("%-30s %-24s %s" % ("way", "glue", "file"))
    for r in rows:
        print("%-30s %-24s %s" % r)


if __name__ == "__main__":
    main()
