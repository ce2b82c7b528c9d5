# rgpu_cuda_program(LIST NAME SOURCE OUTDIR [nvcc flags...])
# Builds a CUDA program exactly as users build theirs: nvcc -cudart shared. It
# links NVIDIA's libcudart.so.13 at build time and loads rgpu's at run time.
# The output path is appended to LIST.
function(rgpu_cuda_program list name src outdir)
  set(out "${outdir}/${name}")
  add_custom_command(
    OUTPUT "${out}"
    COMMAND "${RGPU_NVCC}" -cudart shared ${ARGN} -MD -MF "${out}.d" -o "${out}" "${src}"
    DEPENDS "${src}"
    DEPFILE "${out}.d"
    COMMENT "nvcc -cudart shared ${ARGN} ${name}"
    VERBATIM)
  set(${list} ${${list}} "${out}" PARENT_SCOPE)
endfunction()
