"""The command line's exit codes: 0 success; 1 something failed or differed; 2 bad usage or
input; 130 interrupted."""

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
