"""``python -m kafka_audit``: the ``kafka-audit`` command, where no script is on the PATH."""

import sys

from kafka_audit.app.cli import main

sys.exit(main())
