# The layers of dnnc, declared with the libraries: each folder is one library that names
# the libraries (so the folders) it may use. dnnc_check_layering() writes the declared
# graph to the build tree and checks every build that no source includes a folder
# outside its library's dependencies (scripts/check_layering.py), so an upward include
# (a runtime that includes frontend/, a kernel IR that includes transforms/) fails the
# build, not a review.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set_property(GLOBAL PROPERTY DNNC_LAYER_LINES "")

# dnnc_layer(DIR DEPENDS lib...): records that the sources directly in DIR may include
# the folders of the listed dnnc libraries (and, transitively, of theirs).
function(dnnc_layer dir)
  cmake_parse_arguments(arg "" "" "DEPENDS" ${ARGN})
  foreach(dep ${arg_DEPENDS})
    set_property(GLOBAL APPEND PROPERTY DNNC_LAYER_LINES "dep ${dir} ${dep}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY DNNC_LAYER_LINES "dir ${dir}")
endfunction()

# dnnc_library(NAME DIR dir SOURCES src... [DEPENDS dnnc libs...] [PUBLIC libs...]
#              [PRIVATE libs...]): the static library of one folder.
function(dnnc_library name)
  cmake_parse_arguments(arg "" "DIR" "SOURCES;DEPENDS;PUBLIC;PRIVATE" ${ARGN})
  add_library(${name} STATIC ${arg_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${arg_DEPENDS} ${arg_PUBLIC} PRIVATE ${arg_PRIVATE})
  set_property(GLOBAL APPEND PROPERTY DNNC_LAYER_LINES "lib ${name} ${arg_DIR}")
  dnnc_layer(${arg_DIR} DEPENDS ${arg_DEPENDS})
endfunction()

# Writes the layer graph and checks it on every build (target check_layering, in ALL).
function(dnnc_check_layering)
  get_property(lines GLOBAL PROPERTY DNNC_LAYER_LINES)
  list(JOIN lines "\n" text)
  file(WRITE ${CMAKE_BINARY_DIR}/layers.txt "${text}\n")
  set(sources "")
  foreach(line ${lines})
    if(line MATCHES "^dir (.*)$")
      file(GLOB found CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${CMAKE_MATCH_1}/*.h ${CMAKE_SOURCE_DIR}/${CMAKE_MATCH_1}/*.cpp
        ${CMAKE_SOURCE_DIR}/${CMAKE_MATCH_1}/*.def)
      list(APPEND sources ${found})
    endif()
  endforeach()
  set(checker ${CMAKE_SOURCE_DIR}/scripts/check_layering.py)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/layering.stamp
    COMMAND ${Python3_EXECUTABLE} ${checker} --layers ${CMAKE_BINARY_DIR}/layers.txt --root ${CMAKE_SOURCE_DIR}
    COMMAND ${CMAKE_COMMAND} -E touch ${CMAKE_BINARY_DIR}/layering.stamp
    DEPENDS ${checker} ${CMAKE_BINARY_DIR}/layers.txt ${sources}
    COMMENT "Checking the layers' includes")
  add_custom_target(check_layering ALL DEPENDS ${CMAKE_BINARY_DIR}/layering.stamp)
endfunction()
