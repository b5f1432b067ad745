#!/usr/bin/env python3
"""Lists the functions in src/ and crates/ longer than a limit (default 80 lines), and files longer than
about 1,000 lines before their tests. Exit status 1 if any function is over --fail (100).

A function runs from its `fn` line to the closing brace at the same indentation; the tests
(everything from a file's last `#[cfg(test)]` at column 0) are not counted."""
import os, re, sys

def scan(root, warn, fail, file_max):
    bad = 0
    for dirpath, _, names in os.walk(root):
        for n in sorted(names):
            if not n.endswith('.rs'):
                continue
            p = os.path.join(dirpath, n)
            lines = open(p, encoding='utf-8').read().split('\n')
            end = len(lines)
            for i, l in enumerate(lines):
                if l == '#[cfg(test)]':
                    end = i
            if end > file_max:
                print(f'{p}: {end} lines before its tests (over {file_max})')
                bad |= 2
            for i in range(end):
                m = re.match(r'^(\s*)(pub(\([a-z]+\))? )?(const )?(async )?(unsafe )?(extern "C" )?fn ([A-Za-z0-9_]+)', lines[i])
                if not m or lines[i].rstrip().endswith(';'):
                    continue
                ind = m.group(1)
                j = i + 1
                while j < end and lines[j] != ind + '}':
                    j += 1
                length = j - i + 1
                if length > warn:
                    print(f'{p}:{i+1}: {m.group(8)} {length} lines')
                    if length > fail:
                        bad |= 1
    return bad

if __name__ == '__main__':
    args = dict(a.split('=', 1) for a in sys.argv[1:] if a.startswith('--'))
    warn = int(args.get('--warn', 80))
    fail = int(args.get('--fail', 100))
    file_max = int(args.get('--file-max', 1050))
    bad = [scan(root, warn, fail, file_max) for root in ('src', 'crates')]
    sys.exit(1 if any(bad) else 0)
