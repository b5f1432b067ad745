"""A 2-D Poisson problem (5-point Laplacian on an N x N grid) solved with CG and Jacobi:
prints, from rank 0, the world size, the iterations and the residual norm."""
import sys
import petsc4py
petsc4py.init(sys.argv)
from petsc4py import PETSc

n = 64
A = PETSc.Mat().createAIJ([n * n, n * n], nnz=5)
start, end = A.getOwnershipRange()
for row in range(start, end):
    i, j = divmod(row, n)
    A.setValue(row, row, 4.0)
    for ii, jj in ((i - 1, j), (i + 1, j), (i, j - 1), (i, j + 1)):
        if 0 <= ii < n and 0 <= jj < n:
            A.setValue(row, ii * n + jj, -1.0)
A.assemble()
b = A.createVecLeft()
b.set(1.0)
x = A.createVecRight()
ksp = PETSc.KSP().create()
ksp.setOperators(A)
ksp.setType("cg")
ksp.getPC().setType("jacobi")
ksp.setTolerances(rtol=1e-10)
ksp.solve(b, x)
r = b.duplicate()
A.mult(x, r)
r.aypx(-1.0, b)
PETSc.Sys.Print("KSP size=%d its=%d rnorm=%.6e" % (PETSc.COMM_WORLD.getSize(), ksp.getIterationNumber(), r.norm()))
