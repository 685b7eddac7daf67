# Resolves COMMX_WITH_CUDA for the folders that build GPU code (they test for "OFF" and, for
# "AUTO", whether the toolkit is found). AUTO means: only where nvidia-smi lists a GPU. A CPU-only
# machine with the CUDA toolkit installed would otherwise spend most of its build compiling
# kernels it can never run. ON and OFF force either way.
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
      set(COMMX_WITH_CUDA AUTO)  # a GPU: the CUDA folders build when they find the toolkit
    endif()
  endif()
  if(COMMX_WITH_CUDA STREQUAL "OFF")
    message(STATUS "commx: no GPU listed by nvidia-smi; CUDA backends off (-DCOMMX_WITH_CUDA=ON forces them)")
  endif()
else()
  message(FATAL_ERROR "COMMX_WITH_CUDA must be ON, OFF or AUTO, not '${COMMX_WITH_CUDA}'")
endif()
