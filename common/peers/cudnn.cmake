# Finds cuDNN (cudnn.h + libcudnn) and the cuDNN frontend's headers for the cuDNN attention peer
# (common/peers/cudnn_attention.cpp), and defines the INTERFACE target `ladder_cudnn` that the peer
# step links. Included from common/CMakeLists.txt.
#
#   -DLADDER_WITH_CUDNN=AUTO   (default) build the cuDNN row when both are found, else a row that
#                              says "cudnn: not built" and how to enable it; the build never fails
#   -DLADDER_WITH_CUDNN=ON     fail the configure when either is missing
#   -DLADDER_WITH_CUDNN=OFF    never build it
#   -DCUDNN_ROOT=DIR           a cuDNN with DIR/include/cudnn.h and DIR/lib*/libcudnn.so* (also $CUDNN_ROOT)
#   -DCUDNN_FRONTEND_INCLUDE_DIR=DIR   where cudnn_frontend.h is (also $CUDNN_FRONTEND_INCLUDE_DIR)
#
# cuDNN is searched, in this order, in CUDNN_ROOT, the CUDA toolkit's directory, the system's
# directories, and the site-packages of the `python3` on PATH (PyPI's nvidia-cudnn-cu12/-cu13 wheels,
# which PyTorch installs, put it in nvidia/cudnn/{include,lib}). The header and the library are
# taken from the same place, so they are one version. The frontend is header-only: scripts/install-deps.sh
# unpacks PyPI's nvidia-cudnn-frontend wheel's include/ into .deps/cudnn_frontend/include (ignored by
# git); a pip-installed nvidia-cudnn-frontend (site-packages/include) is found too.

set(LADDER_WITH_CUDNN AUTO CACHE STRING "cuDNN attention peer row: AUTO (when found), ON (required), OFF")
set_property(CACHE LADDER_WITH_CUDNN PROPERTY STRINGS AUTO ON OFF)
set(CUDNN_ROOT "$ENV{CUDNN_ROOT}" CACHE PATH "A cuDNN installation (include/cudnn.h, lib/libcudnn.so*)")
set(CUDNN_FRONTEND_INCLUDE_DIR "$ENV{CUDNN_FRONTEND_INCLUDE_DIR}" CACHE PATH
    "The directory holding cudnn_frontend.h (header-only cuDNN frontend)")

# The oldest versions the peer is written and tested against.
set(LADDER_CUDNN_MIN_VERSION 9.0.0)
set(LADDER_CUDNN_FRONTEND_MIN_VERSION 1.32.0)

add_library(ladder_cudnn INTERFACE)

# "#define NAME 12" in FILE -> OUT = 12 (empty when absent).
function(ladder_read_define file name out)
  file(STRINGS "${file}" line REGEX "^#define[ \t]+${name}[ \t]+[0-9]+")
  string(REGEX REPLACE "^#define[ \t]+${name}[ \t]+([0-9]+).*" "\\1" value "${line}")
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

# Where to look: (include dir, library dir) pairs, in order of preference.
function(ladder_cudnn_candidate_roots out)
  set(roots "")
  if(CUDNN_ROOT)
    list(APPEND roots "${CUDNN_ROOT}")
  endif()
  # The toolkit: /usr/local/cuda, and its targets/<arch> directory where the headers really are.
  if(CUDAToolkit_LIBRARY_ROOT)
    list(APPEND roots "${CUDAToolkit_LIBRARY_ROOT}")
  endif()
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    get_filename_component(parent "${dir}" DIRECTORY)
    list(APPEND roots "${parent}")
  endforeach()
  list(APPEND roots /usr /usr/local)
  # The Python on PATH: PyPI's cuDNN wheels.
  find_program(LADDER_PYTHON_FOR_CUDNN NAMES python3 python NO_CACHE)
  if(LADDER_PYTHON_FOR_CUDNN)
    execute_process(
      COMMAND "${LADDER_PYTHON_FOR_CUDNN}" -c
              "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])"
      OUTPUT_VARIABLE sites OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" sites "${sites}")
      list(REMOVE_DUPLICATES sites)
      foreach(site IN LISTS sites)
        list(APPEND roots "${site}/nvidia/cudnn" "${site}/nvidia/cu13" "${site}/nvidia/cu12")
      endforeach()
      set(LADDER_PYTHON_SITES "${sites}" PARENT_SCOPE)
    endif()
  endif()
  list(REMOVE_DUPLICATES roots)
  set(${out} "${roots}" PARENT_SCOPE)
endfunction()

set(ladder_cudnn_missing "")
if(LADDER_WITH_CUDNN STREQUAL "OFF")
  set(ladder_cudnn_missing "LADDER_WITH_CUDNN is OFF")
else()
  # ---- cuDNN: the first root with both the header and the library ----
  ladder_cudnn_candidate_roots(ladder_roots)
  set(LADDER_CUDNN_INCLUDE "")
  set(LADDER_CUDNN_LIBRARY "")
  foreach(root IN LISTS ladder_roots)
    find_path(inc cudnn_version.h PATHS "${root}/include" "${root}/include/x86_64-linux-gnu"
              "${root}/include/aarch64-linux-gnu" NO_DEFAULT_PATH NO_CACHE)
    find_library(lib NAMES cudnn libcudnn.so.9
                 PATHS "${root}/lib64" "${root}/lib" "${root}/lib/x86_64-linux-gnu"
                       "${root}/lib/aarch64-linux-gnu"
                 NO_DEFAULT_PATH NO_CACHE)
    if(inc AND lib AND EXISTS "${inc}/cudnn.h")
      set(LADDER_CUDNN_INCLUDE "${inc}")
      set(LADDER_CUDNN_LIBRARY "${lib}")
      break()
    endif()
    unset(inc)
    unset(lib)
  endforeach()

  if(NOT LADDER_CUDNN_INCLUDE)
    string(REPLACE ";" ", " where "${ladder_roots}")
    set(ladder_cudnn_missing "cudnn.h and libcudnn were not found together (looked in ${where})")
  else()
    ladder_read_define("${LADDER_CUDNN_INCLUDE}/cudnn_version.h" CUDNN_MAJOR major)
    ladder_read_define("${LADDER_CUDNN_INCLUDE}/cudnn_version.h" CUDNN_MINOR minor)
    ladder_read_define("${LADDER_CUDNN_INCLUDE}/cudnn_version.h" CUDNN_PATCHLEVEL patch)
    set(LADDER_CUDNN_VERSION "${major}.${minor}.${patch}")
    if(LADDER_CUDNN_VERSION VERSION_LESS LADDER_CUDNN_MIN_VERSION)
      set(ladder_cudnn_missing
          "cuDNN ${LADDER_CUDNN_VERSION} in ${LADDER_CUDNN_INCLUDE} is older than ${LADDER_CUDNN_MIN_VERSION}")
    endif()
  endif()

  # ---- the frontend (header-only) ----
  set(fe_hints "")
  if(CUDNN_FRONTEND_INCLUDE_DIR)
    list(APPEND fe_hints "${CUDNN_FRONTEND_INCLUDE_DIR}")
  endif()
  list(APPEND fe_hints "${PROJECT_SOURCE_DIR}/.deps/cudnn_frontend/include")
  foreach(site IN LISTS LADDER_PYTHON_SITES)
    list(APPEND fe_hints "${site}/include")
  endforeach()
  find_path(fe_inc cudnn_frontend.h PATHS ${fe_hints} /usr/include /usr/local/include
            NO_DEFAULT_PATH NO_CACHE)
  if(NOT fe_inc)
    if(NOT ladder_cudnn_missing)
      set(ladder_cudnn_missing "the cuDNN frontend headers (cudnn_frontend.h) were not found")
    endif()
  else()
    ladder_read_define("${fe_inc}/cudnn_frontend_version.h" CUDNN_FRONTEND_MAJOR_VERSION fmajor)
    ladder_read_define("${fe_inc}/cudnn_frontend_version.h" CUDNN_FRONTEND_MINOR_VERSION fminor)
    ladder_read_define("${fe_inc}/cudnn_frontend_version.h" CUDNN_FRONTEND_PATCH_VERSION fpatch)
    set(LADDER_CUDNN_FRONTEND_VERSION "${fmajor}.${fminor}.${fpatch}")
    if(LADDER_CUDNN_FRONTEND_VERSION VERSION_LESS LADDER_CUDNN_FRONTEND_MIN_VERSION AND NOT ladder_cudnn_missing)
      set(ladder_cudnn_missing "the cuDNN frontend in ${fe_inc} is ${LADDER_CUDNN_FRONTEND_VERSION}, older than ${LADDER_CUDNN_FRONTEND_MIN_VERSION}")
    endif()
  endif()
endif()

if(ladder_cudnn_missing)
  if(LADDER_WITH_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "LADDER_WITH_CUDNN=ON but ${ladder_cudnn_missing}. Run scripts/install-deps.sh "
                        "(it fetches the frontend headers), or set CUDNN_ROOT / CUDNN_FRONTEND_INCLUDE_DIR.")
  endif()
  message(STATUS "cuDNN attention peer: not built (${ladder_cudnn_missing})")
  set(LADDER_HAVE_CUDNN OFF)
  # The reason travels into the row that says "cudnn: not built"; keep it free of quotes.
  string(REPLACE "\"" "'" ladder_cudnn_missing "${ladder_cudnn_missing}")
  target_compile_definitions(ladder_cudnn INTERFACE "LADDER_CUDNN_MISSING=\"${ladder_cudnn_missing}\"")
else()
  message(STATUS "cuDNN attention peer: cuDNN ${LADDER_CUDNN_VERSION} (${LADDER_CUDNN_LIBRARY}), "
                 "frontend ${LADDER_CUDNN_FRONTEND_VERSION} (${fe_inc})")
  set(LADDER_HAVE_CUDNN ON)
  get_filename_component(ladder_cudnn_libdir "${LADDER_CUDNN_LIBRARY}" DIRECTORY)
  # SYSTEM: the frontend's own warnings are not ours to fix.
  target_include_directories(ladder_cudnn SYSTEM INTERFACE "${fe_inc}" "${LADDER_CUDNN_INCLUDE}")
  # The frontend's experimental engines compile kernels with NVRTC, so it calls NVRTC directly.
  target_link_libraries(ladder_cudnn INTERFACE "${LADDER_CUDNN_LIBRARY}" CUDA::nvrtc ${CMAKE_DL_LIBS})
  target_compile_definitions(ladder_cudnn INTERFACE LADDER_HAVE_CUDNN=1
                             "LADDER_CUDNN_LIBRARY_DIR=\"${ladder_cudnn_libdir}\"")
endif()
