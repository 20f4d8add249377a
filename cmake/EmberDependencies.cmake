# Every dependency is a Debian package (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Eigen3 3.4 REQUIRED CONFIG)
find_package(dnnl REQUIRED CONFIG)
find_package(fmt REQUIRED CONFIG)
find_package(nlohmann_json 3 REQUIRED CONFIG)  # state dicts' JSON side, safetensors headers
