! A Fortran MPI hello: Open MPI's Fortran programs name libmpi_mpifh.so.40 (or the
! usempif08 bindings), not libmpi.so.40. Prints "hello.f90: rank R of N" after an allreduce.
program hello
  use mpi
  implicit none
  integer :: ierr, rank, nranks, total
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call MPI_Allreduce(rank, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (total /= nranks * (nranks - 1) / 2) then
    print '(a,i0)', 'hello.f90: allreduce gave ', total
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  print '(a,i0,a,i0)', 'hello.f90: rank ', rank, ' of ', nranks
  call MPI_Finalize(ierr)
end program hello
