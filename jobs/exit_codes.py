"""Every exit code the CLI uses, in one place."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2  # click's own code for a bad command line
    INVALID_INPUT = 2  # a bad input file: same family as a bad command line
    UNAVAILABLE = 3  # the broker or the model cannot be reached at start-up
    COMPLETED_WITH_ERRORS = 4  # the job finished, but some records went to the dead-letter topic
    REFUSED = 5  # backpressure: the job would push the backlog past --max-backlog
    WORKERS_GONE = 6  # mid-job: no worker (or the embedded broker) alive; results so far go beside -o
    TIMED_OUT = 7  # --timeout-s passed before the job completed; results so far go beside -o
    CANCELLED = 8  # mid-wait: the job was cancelled (nearline cancel); results so far go beside -o
    EXPIRED = 9  # its completion window (--complete-within) passed: what finished is written, the rest listed
    NOT_AUTHENTICATED = 10  # Kafka refused the login (a wrong password, an unknown user, a mechanism it lacks)
    NOT_AUTHORIZED = 11  # Kafka refused an operation: the principal lacks an ACL (the message names it)
    TLS_FAILED = 12  # the TLS handshake with Kafka failed (an unknown CA, a host name the certificate lacks)
