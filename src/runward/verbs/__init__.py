"""One module per verb of the command line (cli.VERBS names them).

Each has add_arguments(p), which adds the verb's own arguments to its argparse parser
(cli.py adds the common flags first), and run(args, out), which makes the call and renders
it (human text, or one JSON document through out) and returns the exit code. Rendering
used by one verb lives in its module; rendering shared by several lives in views/render.py.

cli.py imports a verb's module to build its parser, for `runward VERB --help` too, so a
verb module imports only light modules at its top; api, files, lint and health (transport,
json, the agent's parser) are imported inside run().
"""
