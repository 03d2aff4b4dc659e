"""The python target: the numpy reference interpreter (`mdsl.interpret`), the node kernels
it runs, and the backend that puts it behind the Executable interface."""
