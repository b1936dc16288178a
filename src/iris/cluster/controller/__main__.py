import sys

from iris.cluster.controller.state_lock import lock_from_argv

lock_from_argv(sys.argv[1:])  # a state dir in use is refused before the heavy imports

from iris.cluster.controller.main import main  # noqa: E402

main()
