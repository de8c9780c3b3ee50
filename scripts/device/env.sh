# Sourced by the device scripts: registers NVIDIA's OpenCL with the ICD loader (DESIGN.md "Targets") and keeps
# stowage's program cache under the command's output folder.
export OCL_ICD_VENDORS=$(mktemp -d)
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > "$OCL_ICD_VENDORS/nvidia.icd"
export STOWAGE_CACHE_DIR=${OUT:-/tmp}/stowage-cache
