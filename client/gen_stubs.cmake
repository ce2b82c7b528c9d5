# Generates weak C stubs for every exported CUDA runtime name.
# In: EXPORTS (list file), OUT (C file).
file(STRINGS "${EXPORTS}" names)
set(body "/* Generated from cudart_exports.txt by gen_stubs.cmake. Do not edit. */\nextern int rgpu_unsupported(const char* name);\n")
foreach(n IN LISTS names)
  string(APPEND body "__attribute__((weak, visibility(\"default\"))) int ${n}(void) { return rgpu_unsupported(\"${n}\"); }\n")
endforeach()
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
