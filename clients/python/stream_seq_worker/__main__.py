"""python3 -m stream_seq_worker lag [CONNINFO] [--stream T] [--consumer C]
[--no-slots]: the same as the stream-seq-lag command."""

import sys

from .lag import main

USAGE = "usage: python3 -m stream_seq_worker lag [CONNINFO] [--stream TABLE] [--consumer NAME] [--no-slots]"

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "lag":
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[2:], prog="python3 -m stream_seq_worker lag"))
