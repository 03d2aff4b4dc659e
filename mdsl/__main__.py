from mdsl.tools.cli import main

raise SystemExit(main())
