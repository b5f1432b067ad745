! A Fortran MPI hello over Fortran bindings of the test's own making (fortran_shim.c), for
! an MPI that ships none: the program names libkfort.so, not libmpi. Prints
! "hello_shim.f90: rank R of N" after an allreduce.
program hello_shim
  implicit none
  integer :: ierr, world, rank, nranks, total
  call mpi_init(ierr)
  call kfort_comm_world(world)
  call mpi_comm_rank(world, rank, ierr)
  call mpi_comm_size(world, nranks, ierr)
  call kfort_sum(rank, total, world, ierr)
  if (ierr /= 0 .or. total /= nranks * (nranks - 1) / 2) then
    print '(a,i0)', 'hello_shim.f90: allreduce gave ', total
    stop 1
  end if
  print '(a,i0,a,i0)', 'hello_shim.f90: rank ', rank, ' of ', nranks
  call mpi_finalize(ierr)
end program hello_shim
