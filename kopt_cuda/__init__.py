"""kopt's CUDA backend: ``.cu`` files exposing ``extern "C" void solve(...)``, parsed for their interface,
built with nvcc into one shared library per candidate (cached by content), called through ctypes in the
bench worker, and disassembled with cuobjdump for SASS verification."""
