/* tally.c — the operator's tool (placeholder until its subcommands land). */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--help") == 0) {
        puts("usage: tally COMMAND [flags]\n\nno commands yet");
        return 0;
    }
    fprintf(stderr, "tally: no commands yet (see tally --help)\n");
    return 2;
}
