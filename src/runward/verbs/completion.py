"""runward completion bash|zsh: a completion script for the shell. Verbs and each verb's
flags come from the real parsers when the script is made (so it is made again after an
upgrade); run and target names are read when completing, from the runward.toml of the
directory the shell is in, through the hidden fast verb `runward _complete runs|targets`."""

from __future__ import annotations

import argparse


def add_arguments(p) -> None:
    p.add_argument("shell", choices=["bash", "zsh"],
                   help='bash: eval "$(runward completion bash)" in ~/.bashrc; '
                        'zsh: eval "$(runward completion zsh)" in ~/.zshrc, after compinit')


def run(args, out) -> int:
    verbs = spec(args.verb_parsers())
    script = bash_script(verbs) if args.shell == "bash" else zsh_script(verbs)
    out.doc({"ok": True, "command": "completion", "result": {"shell": args.shell, "script": script}})
    if not out.json:
        from ._common import write_out
        write_out(script)
    return 0


def spec(parsers) -> list[dict]:
    """Every verb of PARSERS ((name, help, parser), cli.verb_parsers): its help, its options
    (those with help: hidden aliases stay hidden), whether its first positional is a run
    name, the choices of its positional, and whether it takes a command after --."""
    verbs = []
    for name, help_, sub in parsers:
        v = {"name": name, "help": help_, "options": [], "run_name": False, "choices": None, "command": False}
        for a in sub._actions:
            if a.help == argparse.SUPPRESS:
                continue
            if a.option_strings:
                v["options"].append({"flags": list(a.option_strings), "help": a.help or "",
                                     "value": a.nargs != 0, "choices": list(a.choices) if a.choices else None,
                                     "metavar": a.metavar or a.dest})
            elif a.dest == "name" and not v["choices"]:
                v["run_name"] = True
            elif a.dest == "command":
                v["command"] = True
            elif a.choices and not v["run_name"]:
                v["choices"] = list(a.choices)
        verbs.append(v)
    return verbs


# Options whose value is a target name or a local file, on every verb that has them.
TARGET_OPTIONS = ("--on",)
FILE_OPTIONS = ("--config", "--env-file", "--output", "-o")


def bash_script(verbs: list[dict]) -> str:
    def case(fn):
        return "\n".join(f"        {v['name']}) echo {fn(v)!s};;" for v in verbs)

    def words(ws):
        return "'" + " ".join(ws) + "'"
    opts = case(lambda v: words(f for o in v["options"] for f in o["flags"]))
    valued = case(lambda v: words(f for o in v["options"] if o["value"] for f in o["flags"]))
    choices = "\n".join(f"        '{v['name']} {f}') echo {words(o['choices'])};;"
                        for v in verbs for o in v["options"] if o["choices"] for f in o["flags"])
    positional = case(lambda v: words(v["choices"] or []))
    return BASH.format(verbs=" ".join(v["name"] for v in verbs), opts=opts, valued=valued, choices=choices or "        *) ;;",
                       positional=positional, named=" ".join(v["name"] for v in verbs if v["run_name"]),
                       targets="|".join(TARGET_OPTIONS), files="|".join(FILE_OPTIONS))


BASH = r"""# bash completion for runward, made by `runward completion bash` (make it again after an upgrade).
# Load it: eval "$(runward completion bash)" in ~/.bashrc, or save it as
# ~/.local/share/bash-completion/completions/runward
_runward_verbs='{verbs}'
_runward_named=' {named} '
_runward_opts() {{
    case "$1" in
{opts}
    esac
}}
_runward_valued() {{
    case "$1" in
{valued}
    esac
}}
_runward_choices() {{
    case "$1 $2" in
{choices}
    esac
}}
_runward_positional() {{
    case "$1" in
{positional}
    esac
}}
# names from the runward.toml the command line would use (its --config, else the nearest)
_runward_names() {{
    local i cfg=()
    for ((i = 1; i < ${{#COMP_WORDS[@]}} - 1; i++)); do
        [[ ${{COMP_WORDS[i]}} == --config ]] && cfg=(--config "${{COMP_WORDS[i+1]}}")
    done
    "${{COMP_WORDS[0]}}" _complete "$1" "${{cfg[@]}}" 2>/dev/null
}}
_runward() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} verb= npos=0 i w
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        [[ $w == -- ]] && return 0  # the job's command follows: the shell's own completion
        if [[ -z $verb ]]; then
            [[ $w != -* ]] && verb=$w
        elif [[ $w == -* ]]; then
            [[ " $(_runward_valued "$verb") " == *" $w "* ]] && ((i++))
        else
            ((npos++))
        fi
    done
    if [[ -z $verb ]]; then
        COMPREPLY=($(compgen -W "$_runward_verbs --help --version" -- "$cur"))
        return 0
    fi
    case $prev in
        {targets}) COMPREPLY=($(compgen -W "local $(_runward_names targets)" -- "$cur")); return 0;;
        {files}) COMPREPLY=($(compgen -f -- "$cur")); return 0;;
    esac
    if [[ " $(_runward_valued "$verb") " == *" $prev "* ]]; then
        COMPREPLY=($(compgen -W "$(_runward_choices "$verb" "$prev")" -- "$cur"))
        return 0
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_runward_opts "$verb")" -- "$cur"))
    elif ((npos == 0)) && [[ $_runward_named == *" $verb "* ]]; then
        COMPREPLY=($(compgen -W "$(_runward_names runs)" -- "$cur"))
    elif ((npos == 0)); then
        COMPREPLY=($(compgen -W "$(_runward_positional "$verb")" -- "$cur"))
    fi
}}
complete -o default -F _runward runward
"""


def _zsh_quote(text: str) -> str:
    """TEXT inside a single-quoted _arguments spec: brackets and colons are its syntax."""
    text = " ".join(text.split()).replace("[", "(").replace("]", ")").replace(":", r"\:")
    return text.replace("'", "'\\''")


def _zsh_option(o: dict) -> str:
    desc = _zsh_quote(o["help"])
    flags = o["flags"]
    head = ("(" + " ".join(flags) + ")'{" + ",".join(flags) + "}'") if len(flags) > 1 else flags[0]
    if not o["value"]:
        return f"'{head}[{desc}]'"
    if flags[0] in TARGET_OPTIONS:
        action = "_runward_targets"
    elif flags[0] in FILE_OPTIONS:
        action = "_files"
    elif o["choices"]:
        action = "(" + " ".join(map(str, o["choices"])) + ")"
    else:
        action = " "
    return f"'{head}[{desc}]:{_zsh_quote(str(o['metavar']))}:{action}'"


def zsh_script(verbs: list[dict]) -> str:
    cases = []
    for v in verbs:
        specs = [_zsh_option(o) for o in v["options"]]
        if v["run_name"]:
            specs.append("'1::run:_runward_runs'")
        elif v["choices"]:
            specs.append(f"'1:{v['name']}:(" + " ".join(v["choices"]) + ")'")
        if v["command"]:
            specs.append("'*::command:_normal'")
        cases.append(f"        {v['name']})\n            _arguments -s -S \\\n                "
                     + " \\\n                ".join(specs) + " ;;")
    described = "\n".join(f"        '{v['name']}:{_zsh_quote(v['help'])}'" for v in verbs)
    return ZSH.format(verbs=described, cases="\n".join(cases))


ZSH = r"""#compdef runward
# zsh completion for runward, made by `runward completion zsh` (make it again after an upgrade).
# Load it: eval "$(runward completion zsh)" in ~/.zshrc after compinit, or save it as _runward
# in a directory of $fpath.
_runward_names() {{
    local cfg i
    for ((i = 2; i < $#words; i++)); do
        [[ ${{words[i]}} == --config ]] && cfg=(--config "${{words[i+1]}}")
    done
    _call_program runward-names "${{(q)_runward_cmd}}" _complete $1 $cfg 2>/dev/null
}}
_runward_runs() {{
    local -a names
    names=(${{(f)"$(_runward_names runs)"}})
    _describe -t runs 'run' names
}}
_runward_targets() {{
    local -a names
    names=(local ${{(f)"$(_runward_names targets)"}})
    _describe -t targets 'target' names
}}
_runward() {{
    local curcontext=$curcontext state line _runward_cmd=${{words[1]}}
    local -a verbs
    verbs=(
{verbs}
    )
    _arguments -C '(- *)--help[show help]' '(- *)--version[show the version]' '1: :->verb' '*:: :->args' && return
    case $state in
    verb) _describe -t commands 'runward command' verbs ;;
    args)
        case ${{words[1]}} in
{cases}
        esac ;;
    esac
}}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _runward "$@"
else
    compdef _runward runward
fi
"""
