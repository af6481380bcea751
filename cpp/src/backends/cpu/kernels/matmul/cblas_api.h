// The one place CBLAS/OpenBLAS function names are spelled. The build links either
// the system OpenBLAS (plain names: cblas_sgemm) or scipy-openblas32 from PyPI,
// whose header and library prefix every symbol (scipy_cblas_sgemm,
// scipy_openblas_set_num_threads) so that it can share a process with another
// OpenBLAS (numpy's, torch's) without symbol clashes. CMake passes that prefix as
// XRT_BLAS_SYMBOL_PREFIX; callers write XRT_BLAS(cblas_sgemm)(...). Types and enums
// (blasint, CBLAS_TRANSPOSE, CblasRowMajor) are not prefixed in either header.
// Include only under XRT_HAVE_CBLAS.
#pragma once

#ifndef XRT_HAVE_CBLAS
#error "cblas_api.h needs a build with CBLAS (XRT_HAVE_CBLAS)"
#endif

#include <cblas.h>

#define XRT_BLAS_CONCAT_(a, b) a##b
#define XRT_BLAS_CONCAT(a, b) XRT_BLAS_CONCAT_(a, b)
#ifdef XRT_BLAS_SYMBOL_PREFIX
#define XRT_BLAS(name) XRT_BLAS_CONCAT(XRT_BLAS_SYMBOL_PREFIX, name)
#else
#define XRT_BLAS(name) name
#endif

// Where the library came from, for cpu_blas_info(). Only the PyPI wheel prefixes its
// symbols (CMake sets no prefix for a system OpenBLAS).
#ifdef XRT_BLAS_SYMBOL_PREFIX
#define XRT_BLAS_SOURCE "scipy-openblas32 from PyPI"
#else
#define XRT_BLAS_SOURCE "system OpenBLAS"
#endif
