//! Shell completions for `kauri`, generated from the pages: bash, zsh and fish.
//!
//! All three read the words before the cursor the same way: an option takes the number of
//! words its [`Arg`](super::Arg) says (none when written `--name=VALUE`); the first other word
//! is the program, and everything after it, up to a lone `:`, is the program's: completed as
//! file names, never as kauri's options. After `:` a new segment starts. The first word may
//! be a subcommand (`nameserver`, `kvs`, `pmi`, `--status`, `agent`), completed by its own
//! page's options or words.

use super::{normalize, Page, Values};

/// The shells [`script`] writes for.
pub const SHELLS: &[&str] = &["bash", "zsh", "fish"];

/// The completion script for `shell` (`bash`, `zsh` or `fish`), or `None` for another shell.
pub fn script(shell: &str) -> Option<String> {
    match shell {
        "bash" => Some(bash()),
        "zsh" => Some(zsh()),
        "fish" => Some(fish()),
        _ => None,
    }
}

/// The subcommands with a page of their own (`kauri-kvs`: `kauri kvs`), as the first word.
fn subpages() -> Vec<(&'static str, &'static Page)> {
    super::pages()
        .iter()
        .filter_map(|p| Some((p.name.strip_prefix("kauri-")?, *p)))
        .collect()
}

/// A name as the scripts compare it: no leading dash, lower case (but `V`).
fn bare(name: &str) -> String {
    normalize(name)[1..].to_string()
}

/// `(names, words)` for every option of `page` taking words: which options take how many.
fn arities(page: &Page) -> Vec<(usize, Vec<String>)> {
    let mut by: Vec<(usize, Vec<String>)> = Vec::new();
    for o in page.opts() {
        let k = o.arg.words();
        if k == 0 {
            continue;
        }
        let names = o.all_names().map(bare);
        match by.iter_mut().find(|(n, _)| *n == k) {
            Some((_, v)) => v.extend(names),
            None => by.push((k, names.collect())),
        }
    }
    for (_, v) in &mut by {
        v.sort();
        v.dedup();
    }
    by
}

/// `(names, what)` for every option of `page` whose argument completes: the words, `@file`
/// or `@dir`.
fn value_kinds(page: &Page) -> Vec<(Vec<String>, String)> {
    let mut out: Vec<(Vec<String>, String)> = Vec::new();
    for o in page.opts() {
        let what = match o.values {
            Values::Any => continue,
            Values::Words(w) => w.join(" "),
            Values::File => "@file".into(),
            Values::Dir => "@dir".into(),
            Values::Pages => super::pages()
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(" "),
        };
        let names: Vec<String> = o.all_names().map(bare).collect();
        match out.iter_mut().find(|(n, _)| *n == names) {
            Some((_, w)) if *w != what => {
                // -map-by, listed twice: the union of both lists.
                let mut all: Vec<&str> = w.split(' ').chain(what.split(' ')).collect();
                all.dedup();
                let mut seen = Vec::new();
                all.retain(|x| {
                    let new = !seen.contains(x);
                    seen.push(*x);
                    new
                });
                *w = all.join(" ");
            }
            Some(_) => {}
            None => out.push((names, what)),
        }
    }
    out
}

/// A page's option names that start with a dash, space-separated (a subcommand's options).
fn dash_names(page: &Page) -> String {
    shown(page)
        .into_iter()
        .filter(|n| n.starts_with('-'))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every shown option name of `page`, deduplicated, in order.
fn shown(page: &Page) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    for o in page.opts() {
        for n in o.names {
            if !v.contains(n) {
                v.push(n);
            }
        }
    }
    v
}

/// A shell case pattern: `a|b|c`, each name quoted.
fn alternatives(names: &[String], sep: &str) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(sep)
}

/// Single quotes for a shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The bash and zsh function bodies shared by both: `_kauri_nargs NAME` prints how many
/// words option NAME takes; `_kauri_values NAME` what its argument completes to.
fn posix_helpers(lower: &str) -> String {
    let mut s = String::new();
    s.push_str("_kauri_bare() {\n    local n=\"${1#\"${1%%[!-]*}\"}\"\n");
    s.push_str(&format!(
        "    [ \"$n\" = V ] || n=\"{lower}\"\n    printf '%s' \"$n\"\n}}\n"
    ));
    s.push_str("_kauri_nargs() {\n    case \"$1\" in *=*) echo 0; return;; esac\n");
    s.push_str("    case \"$(_kauri_bare \"$1\")\" in\n");
    for (k, names) in arities(&super::KAURI) {
        s.push_str(&format!(
            "        {}) echo {k};;\n",
            alternatives(&names, "|")
        ));
    }
    s.push_str("        *) echo 0;;\n    esac\n}\n");
    s.push_str("_kauri_values() {\n    case \"$(_kauri_bare \"$1\")\" in\n");
    for (names, what) in value_kinds(&super::KAURI) {
        s.push_str(&format!(
            "        {}) echo {};;\n",
            alternatives(&names, "|"),
            quote(&what)
        ));
    }
    s.push_str("    esac\n}\n");
    s
}

/// The bash script: `complete -F _kauri kauri`.
pub fn bash() -> String {
    let kauri = &super::KAURI;
    let opts = shown(kauri).join(" ");
    let long: Vec<String> = shown(kauri)
        .iter()
        .map(|n| format!("--{}", n.trim_start_matches('-')))
        .filter(|n| n.len() > 3)
        .collect();
    let mut s =
        String::from("# bash completion for kauri (generated by `kauri --completions bash`)\n");
    s.push_str(&posix_helpers("${n,,}"));
    s.push_str(&format!("_kauri_opts={}\n", quote(&opts)));
    s.push_str(&format!("_kauri_long={}\n", quote(&long.join(" "))));
    s.push_str(
        r#"_kauri_reply() { # WORDS CUR: the words that start with CUR
    COMPREPLY+=($(compgen -W "$1" -- "$2"))
}
_kauri_files() { # CUR [-d]
    local IFS=$'\n'
    compopt -o filenames 2>/dev/null
    COMPREPLY+=($(compgen "${2:--f}" -- "$1"))
}
_kauri_value() { # OPTION CUR
    local v
    v="$(_kauri_values "$1")"
    case "$v" in
        '') ;;
        @file) _kauri_files "$2" ;;
        @dir) _kauri_files "$2" -d ;;
        *) _kauri_reply "$v" "$2" ;;
    esac
}
_kauri() {
    local line="${COMP_LINE:0:COMP_POINT}"
    local -a w
    read -ra w <<< "$line"
    [[ "$line" =~ [[:space:]]$ || ${#w[@]} -eq 0 ]] && w+=("")
    local cword=$(( ${#w[@]} - 1 ))
    local cur="${w[cword]}"
    COMPREPLY=()
    if (( cword > 1 )); then
        case "${w[1]}" in
"#,
    );
    for (word, page) in subpages() {
        let dash = dash_names(page);
        let words = page.words.join(" ");
        s.push_str(&format!(
            "            {word}) if (( cword == 2 )) && [[ $cur != -* ]]; then _kauri_reply {} \"$cur\"; \
             elif [[ $cur == -* ]]; then _kauri_reply {} \"$cur\"; fi; return;;\n",
            quote(&words),
            quote(&dash)
        ));
    }
    s.push_str(
        r#"            --status|-status) _kauri_reply '--stacks' "$cur"; return;;
        esac
    fi
    local i=1 n
    while (( i < cword )); do
        case "${w[i]}" in
            :) ;;
            -*)
                n=$(_kauri_nargs "${w[i]}")
                if (( i + n >= cword )); then
                    (( cword - i == 1 )) && _kauri_value "${w[i]}" "$cur"
                    return
                fi
                (( i += n ));;
            *)
                local j=$(( i + 1 ))
                while (( j < cword )) && [[ "${w[j]}" != : ]]; do (( j++ )); done
                if (( j >= cword )); then
                    _kauri_files "$cur"
                    return
                fi
                i=$j;;
        esac
        (( i++ ))
    done
    case "$cur" in
        -*=*)
            local v
            v="$(_kauri_values "${cur%%=*}")"
            case "$v" in @*|'') return;; esac
            if [[ $COMP_WORDBREAKS == *=* ]]; then
                _kauri_reply "$v" "${cur#*=}"
            else
                local x
                for x in $v; do [[ "${cur%%=*}=$x" == "$cur"* ]] && COMPREPLY+=("${cur%%=*}=$x"); done
            fi;;
        --*)
            _kauri_reply "$_kauri_long" "$cur"
            (( cword == 1 )) && _kauri_reply '--status' "$cur";;
        -*)
            _kauri_reply "$_kauri_opts" "$cur"
            (( cword == 1 )) && _kauri_reply '--status' "$cur";;
        *)
"#,
    );
    s.push_str(&format!(
        "            (( cword == 1 )) && _kauri_reply {} \"$cur\"\n",
        quote(&kauri.words.join(" "))
    ));
    s.push_str(
        r#"            local IFS=$'\n'
            COMPREPLY+=($(compgen -c -- "$cur"))
            _kauri_files "$cur";;
    esac
}
complete -F _kauri kauri
"#,
    );
    s
}

/// The zsh script, an autoloadable `_kauri` (`#compdef kauri`).
pub fn zsh() -> String {
    let kauri = &super::KAURI;
    let mut s = String::from(
        "#compdef kauri\n# zsh completion for kauri (generated by `kauri --completions zsh`)\n",
    );
    s.push_str(&posix_helpers("${n:l}"));
    s.push_str(&zsh_describe(kauri));
    s.push_str("_kauri() {\n    local cur=$words[CURRENT]\n    if (( CURRENT > 2 )); then\n        case $words[2] in\n");
    s.push_str(&zsh_subcommands());
    s.push_str(
        r#"            --status|-status) compadd -- --stacks; return;;
        esac
    fi
    local i=2 n v
    while (( i < CURRENT )); do
        case $words[i] in
            :) ;;
            -*)
                n=$(_kauri_nargs $words[i])
                if (( i + n >= CURRENT )); then
                    if (( CURRENT - i == 1 )); then
                        v=$(_kauri_values $words[i])
                        case $v in
                            '') _message 'value';;
                            @file) _files;;
                            @dir) _files -/;;
                            *) compadd -- ${=v};;
                        esac
                    fi
                    return
                fi
                (( i += n ));;
            *)
                local j=$(( i + 1 ))
                while (( j < CURRENT )) && [[ $words[j] != : ]]; do (( j++ )); done
                if (( j >= CURRENT )); then
                    _files
                    return
                fi
                i=$j;;
        esac
        (( i++ ))
    done
    if [[ $cur == -*=* ]]; then
        v=$(_kauri_values ${cur%%=*})
        case $v in
            @*|'') ;;
            *) compset -P '*='; compadd -- ${=v};;
        esac
    elif [[ $cur == -* ]]; then
        _kauri_describe
    else
"#,
    );
    s.push_str(&format!(
        "        (( CURRENT == 2 )) && compadd -- {}\n",
        kauri
            .words
            .iter()
            .filter(|w| !w.starts_with('-'))
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    ));
    s.push_str("        _command_names -e\n        _files\n    fi\n}\n_kauri \"$@\"\n");
    s
}

/// zsh's `_kauri_describe`: every option name of `page` with the first line of its help
/// (`--status` too, as the first word).
fn zsh_describe(page: &Page) -> String {
    let mut s = String::from("_kauri_describe() {\n    local -a opts\n    opts=(\n");
    let mut seen = Vec::new();
    for o in page.opts() {
        for n in o.names {
            if seen.contains(n) {
                continue;
            }
            seen.push(n);
            let what = o.help.split('\n').next().unwrap_or("");
            s.push_str(&format!("        {}\n", quote(&format!("{n}:{what}"))));
        }
    }
    s.push_str(
        "    )\n    (( CURRENT == 2 )) && opts+=('--status:where the ranks of running jobs are')\n",
    );
    s.push_str("    _describe -t options 'kauri option' opts\n}\n");
    s
}

/// zsh's case arms for the subcommands with a page: their words, then their options.
fn zsh_subcommands() -> String {
    let mut s = String::new();
    for (word, page) in subpages() {
        let dash = dash_names(page);
        s.push_str(&format!(
            "            {word}) if (( CURRENT == 3 )) && [[ $cur != -* ]]; then compadd -- {}; \
             elif [[ $cur == -* ]]; then compadd -- {}; fi; return;;\n",
            page.words.join(" "),
            dash
        ));
    }
    s
}

/// The fish script: `complete -c kauri ...` entries guarded by `__kauri_state`.
pub fn fish() -> String {
    let kauri = &super::KAURI;
    let mut s =
        String::from("# fish completion for kauri (generated by `kauri --completions fish`)\n");
    s.push_str(&fish_nargs(kauri));
    s.push_str(&fish_state());
    s.push_str(&format!(
        "complete -c kauri -n '__fish_is_first_arg' -f -a {}\n",
        quote(&kauri.words.join(" "))
    ));
    s.push_str(&fish_options(kauri));
    s.push_str(&fish_values(kauri));
    s.push_str(&fish_subcommands());
    s.push_str("complete -c kauri -n '__kauri_sub --status' -l stacks -d 'also the stacks of stuck ranks'\n");
    s
}

/// fish's `__kauri_nargs NAME`: how many words option NAME of `page` takes.
fn fish_nargs(page: &Page) -> String {
    let mut s = String::new();
    s.push_str(
        "function __kauri_nargs\n    if string match -q -- '*=*' $argv[1]\n        echo 0\n        return\n    end\n",
    );
    s.push_str("    set -l n (string replace -r -- '^-+' '' $argv[1])\n    test \"$n\" = V; or set n (string lower -- $n)\n    switch $n\n");
    for (k, names) in arities(page) {
        s.push_str(&format!(
            "        case {}\n            echo {k}\n",
            alternatives(&names, " ")
        ));
    }
    s.push_str("        case '*'\n            echo 0\n    end\nend\n");
    s
}

/// fish's functions that read the words before the cursor (`__kauri_state`, `__kauri_is`,
/// `__kauri_value_of`, `__kauri_sub`), and the completions of programs and of nothing.
fn fish_state() -> String {
    let mut s = String::new();
    s.push_str(
        &r#"# Prints where the cursor is: `sub WORD`, `value OPTION`, `none`, `program` or `options`.
function __kauri_state
    set -l w (commandline -opc)
    set -l count (count $w)
    if test $count -ge 2
        switch $w[2]
            case SUBCOMMANDS --status -status
                echo sub $w[2]
                return
        end
    end
    set -l i 2
    while test $i -le $count
        set -l t $w[$i]
        if test "$t" = ':'
        else if string match -q -- '-*' $t
            set -l n (__kauri_nargs $t)
            if test (math $i + $n) -ge (math $count + 1)
                if test $i -eq $count
                    echo value $t
                else
                    echo none
                end
                return
            end
            set i (math $i + $n)
        else
            set -l j (math $i + 1)
            while test $j -le $count; and test "$w[$j]" != ':'
                set j (math $j + 1)
            end
            if test $j -gt $count
                echo program
                return
            end
            set i $j
        end
        set i (math $i + 1)
    end
    echo options
end
function __kauri_is
    test (__kauri_state) = "$argv"
end
function __kauri_value_of
    set -l st (__kauri_state | string split ' ')
    test "$st[1]" = value; or return 1
    set -l n (string replace -r -- '^-+' '' $st[2])
    test "$n" = V; or set n (string lower -- $n)
    contains -- $n $argv
end
function __kauri_sub
    set -l w (commandline -opc)
    test (count $w) -ge 2; and test "$w[2]" = "$argv[1]"
end
complete -c kauri -n '__kauri_is options; and not string match -q -- "-*" (commandline -ct)' -a '(__fish_complete_command)'
complete -c kauri -n '__kauri_is none' -f
"#
        .replace(
            "SUBCOMMANDS",
            &subpages()
                .iter()
                .map(|(w, _)| *w)
                .collect::<Vec<_>>()
                .join(" "),
        ),
    );
    s
}

/// fish's entries for every option of `page`, with the first line of its help.
fn fish_options(page: &Page) -> String {
    let mut s = String::new();
    for o in page.opts() {
        let what = o.help.split('\n').next().unwrap_or("");
        for n in o.names {
            let flag = match (n.strip_prefix("--"), o.values) {
                // `--pmi=VALUE`: fish completes the value after the `=`.
                (Some(l), Values::Words(w)) => {
                    format!("-l {} -x -a {}", quote(l), quote(&w.join(" ")))
                }
                (Some(l), _) => format!("-l {}", quote(l)),
                (None, _) => format!("-o {}", quote(n.trim_start_matches('-'))),
            };
            s.push_str(&format!(
                "complete -c kauri -n '__kauri_is options' {flag} -d {}\n",
                quote(what)
            ));
        }
    }
    s
}

/// fish's entries for the values of the options of `page` whose argument completes.
fn fish_values(page: &Page) -> String {
    let mut s = String::new();
    for (names, what) in value_kinds(page) {
        let cond = quote(&format!("__kauri_value_of {}", names.join(" ")));
        match what.as_str() {
            "@file" => s.push_str(&format!("complete -c kauri -n {cond} -F\n")),
            "@dir" => s.push_str(&format!(
                "complete -c kauri -n {cond} -f -a '(__fish_complete_directories)'\n"
            )),
            w => s.push_str(&format!("complete -c kauri -n {cond} -f -a {}\n", quote(w))),
        }
    }
    s
}

/// fish's entries for the subcommands with a page: their words, then their options.
fn fish_subcommands() -> String {
    let mut s = String::new();
    for (word, page) in subpages() {
        if !page.words.is_empty() {
            s.push_str(&format!(
                "complete -c kauri -n '__kauri_sub {word}; and test (count (commandline -opc)) -eq 2' -f -a {}\n",
                quote(&page.words.join(" "))
            ));
        }
        for o in page.opts() {
            for n in o.names.iter().filter(|n| n.starts_with('-')) {
                let flag = match n.strip_prefix("--") {
                    Some(l) => format!("-l {}", quote(l)),
                    None => format!("-o {}", quote(n.trim_start_matches('-'))),
                };
                s.push_str(&format!(
                    "complete -c kauri -n '__kauri_sub {word}' {flag} -d {}\n",
                    quote(o.help.split('\n').next().unwrap_or(""))
                ));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arities_follow_the_table() {
        let a = arities(&super::super::KAURI);
        let of = |name: &str| {
            a.iter()
                .find(|(_, v)| v.iter().any(|n| n == name))
                .map(|(k, _)| *k)
        };
        assert_eq!(of("np"), Some(1));
        assert_eq!(of("genv"), Some(2));
        assert_eq!(of("pmi_args"), Some(4));
        assert_eq!(of("machinefile"), Some(1));
        assert_eq!(of("l"), None);
        assert_eq!(of("profile"), None, "--profile takes only --profile=json");
    }

    #[test]
    fn map_by_completes_hosts_and_objects() {
        let v = value_kinds(&super::super::KAURI);
        let (_, w) = v.iter().find(|(n, _)| n == &["map-by"]).unwrap();
        assert!(w.starts_with("node slot") && w.contains("numa"), "{w}");
        assert_eq!(w.matches("core").count(), 1);
    }

    #[test]
    fn unknown_shells_have_no_script() {
        assert!(script("tcsh").is_none());
        for sh in SHELLS {
            assert!(script(sh).is_some_and(|s| s.contains("kauri")));
        }
    }
}
