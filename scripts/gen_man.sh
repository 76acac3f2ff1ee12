#!/bin/sh
# gen_man.sh PROGRAM TEMPLATE OUT — a man page from a template (man/*.in, roff) and the program's
# own --help and --version, so the page's options and commands are the --help text, word for word.
# The template's line @HELP@ becomes the --help text in roff: tallyd's flags as tagged paragraphs,
# tally's commands likewise, the closing notes as paragraphs. @VERSION@ is the version the program
# reports. Flags are written \-\-flag (a hyphen man and grep find, not a typographic one).
set -eu
prog=$1 template=$2 out=$3
version=$("$prog" --version | sed 's/^[^ ]* //')
help=$("$prog" --help)
printf '%s\n' "$help" | awk '
function esc(s) {
    gsub(/\\/, "\\e", s)
    gsub(/-/, "\\-", s)
    sub(/^[.'"'"']/, "\\&&", s)
    return s
}
function tag(s,   name, rest) {
    # the flag or command in bold, its arguments as they are
    name = s; rest = ""
    if (match(s, /^tally [a-z-]+/) || match(s, /^[^ ]+/)) { name = substr(s, 1, RLENGTH); rest = substr(s, RLENGTH + 1) }
    return "\\fB" esc(name) "\\fR" esc(rest)
}
function flush() {
    if (pending != "") { print ".TP"; print tag(pending); pending = "" }
}
NR == 1 && /^usage:/ { next }
/^$/ { blank = 1; next }
# tallyd: "  --flag ARG" then its help from column 30 (on the same line or the next)
/^  --/ {
    line = substr($0, 3); text = ""
    if (length($0) > 29 && substr($0, 28, 2) == "  ") { text = substr($0, 30); line = substr($0, 3, 27) }
    sub(/ +$/, "", line)
    print ".TP"; print tag(line)
    if (text != "") print esc(text)
    blank = 0; item = 1; next
}
# tally: "tally COMMAND ..." then its description, indented by two
# (a usage too long for one line goes on in a line indented further: the same tag)
/^tally / { flush(); pending = $0; blank = 0; item = 1; next }
/^   / && pending != "" { sub(/^ +/, " "); pending = pending $0; next }
/^  / && item && !blank { flush(); sub(/^ +/, ""); print esc($0); next }
{
    flush()
    if (blank || item) { print ".PP"; item = 0; blank = 0 }
    print esc($0)
}
END { flush() }
' > "$out.help"
awk -v help="$out.help" -v version="$version" '
/^@HELP@$/ { while ((getline l < help) > 0) print l; next }
{ gsub(/@VERSION@/, version); print }
' "$template" > "$out.tmp"
rm -f "$out.help"
mv "$out.tmp" "$out"
