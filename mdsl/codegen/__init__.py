"""Graph -> Kernel IR: the plan of a graph (`plan`: fusion groups lowered to `kir`
kernels, buffers, the memory plan), the lowering of each group kind (`lower*`), affine
addressing (`access`), symbolic sizes (`dims`, `specialize`), the shared typing of
expressions (`expr_types`), emitted READMEs (`readme`), templates and the C toolchain.
Targets (`mdsl.targets`) render what this package produces."""
