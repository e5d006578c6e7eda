# Writes OUTPUT: one C++ raw string literal per file in INPUTS, as entries
# {"<file name>", R"tcc_embed(<contents>)tcc_embed"}; the files in EMU_INPUTS
# (tcc's CUDA emulation headers) are named "emu/<file name>".
string(REPLACE "|" ";" INPUTS "${INPUTS}")
string(REPLACE "|" ";" EMU_INPUTS "${EMU_INPUTS}")
set(content "// Generated from the runtime headers by EmbedFiles.cmake.\n")
foreach(input ${INPUTS})
  file(READ ${input} text)
  get_filename_component(name ${input} NAME)
  string(APPEND content "{\"${name}\", R\"tcc_embed(${text})tcc_embed\"},\n")
endforeach()
foreach(input ${EMU_INPUTS})
  file(READ ${input} text)
  get_filename_component(name ${input} NAME)
  string(APPEND content "{\"emu/${name}\", R\"tcc_embed(${text})tcc_embed\"},\n")
endforeach()
file(WRITE ${OUTPUT}.tmp "${content}")
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
