# The one place that decides whether commx builds GPU code. Resolves COMMX_WITH_CUDA (ON, OFF or
# AUTO) and, unless it is OFF, finds the CUDA toolkit and nvcc once for the whole tree:
#   COMMX_CUDA_RUNTIME  ON when the toolkit (CUDA::cudart) is there: host code that calls the
#                       runtime (cuda_common, the nccl plugin, commx-bench's GPU parts)
#   COMMX_CUDA_KERNELS  ON when nvcc is there too (CUDA enabled as a language): the cuda plugin,
#                       the FP8 kernels
# Folders test these two variables and nothing else. AUTO means: only where nvidia-smi lists a
# GPU; a CPU-only machine with the toolkit installed would otherwise spend most of its build
# compiling kernels it can never run. ON fails the configure when either is missing.
string(TOUPPER "${COMMX_WITH_CUDA}" _commx_with_cuda)
if(_commx_with_cuda MATCHES "^(ON|YES|TRUE|Y|1)$")
  set(COMMX_WITH_CUDA ON)
elseif(_commx_with_cuda MATCHES "^(OFF|NO|FALSE|N|0)$")
  set(COMMX_WITH_CUDA OFF)
elseif(_commx_with_cuda STREQUAL "AUTO")
  set(COMMX_WITH_CUDA OFF)
  find_program(COMMX_NVIDIA_SMI nvidia-smi)
  if(COMMX_NVIDIA_SMI)
    execute_process(COMMAND "${COMMX_NVIDIA_SMI}" -L OUTPUT_VARIABLE _commx_gpus
                    RESULT_VARIABLE _commx_smi_rc ERROR_QUIET TIMEOUT 30)
    if(_commx_smi_rc EQUAL 0 AND _commx_gpus MATCHES "GPU [0-9]+:")
      set(COMMX_WITH_CUDA AUTO)  # a GPU: build the CUDA parts when the toolkit is found
    endif()
  endif()
  if(COMMX_WITH_CUDA STREQUAL "OFF")
    message(STATUS "commx: no GPU listed by nvidia-smi; CUDA backends off (-DCOMMX_WITH_CUDA=ON forces them)")
  endif()
else()
  message(FATAL_ERROR "COMMX_WITH_CUDA must be ON, OFF or AUTO, not '${COMMX_WITH_CUDA}'")
endif()

set(COMMX_CUDA_RUNTIME OFF)
set(COMMX_CUDA_KERNELS OFF)
if(NOT COMMX_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  include(CheckLanguage)
  check_language(CUDA)
  if(CUDAToolkit_FOUND)
    set(COMMX_CUDA_RUNTIME ON)
  endif()
  if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${COMMX_CUDA_ARCH})
    endif()
    enable_language(CUDA)
    set(COMMX_CUDA_KERNELS ON)
  endif()
  if(COMMX_WITH_CUDA STREQUAL "ON" AND NOT COMMX_CUDA_KERNELS)
    message(FATAL_ERROR "COMMX_WITH_CUDA=ON but the CUDA toolkit (found: ${CUDAToolkit_FOUND}) "
                        "or nvcc (found: ${CMAKE_CUDA_COMPILER}) is missing")
  endif()
  if(NOT COMMX_CUDA_RUNTIME)
    message(STATUS "commx: CUDA toolkit not found; GPU backends are not built")
  elseif(NOT COMMX_CUDA_KERNELS)
    message(STATUS "commx: nvcc not found; the cuda backend and the FP8 kernels are not built")
  endif()
endif()
