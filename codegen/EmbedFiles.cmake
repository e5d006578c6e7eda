# Writes OUTPUT: one C++ raw string literal per file in INPUTS, as entries
# {"<file name>", R"tcc_embed(<contents>)tcc_embed"}.
string(REPLACE "|" ";" INPUTS "${INPUTS}")
set(content "// Generated from the runtime headers by EmbedFiles.cmake.\n")
foreach(input ${INPUTS})
  file(READ ${input} text)
  get_filename_component(name ${input} NAME)
  string(APPEND content "{\"${name}\", R\"tcc_embed(${text})tcc_embed\"},\n")
endforeach()
file(WRITE ${OUTPUT}.tmp "${content}")
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
