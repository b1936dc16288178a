from iris.cluster.controller.main import main

main()
