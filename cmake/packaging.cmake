# Debian packages (scripts/package.sh; docs/operations.md#debian-packages):
#   rgpu-client  rgpu's libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcurand.so.10, libcufft.so.12,
#                libcusolver.so.12, libcusparse.so.12, libcudnn.so.9
#                in <libdir>/rgpu (never on the default search path: programs
#                get them through rgpu-run or LD_LIBRARY_PATH), rgpu-run,
#                rgpu-smi, /etc/rgpu/client.toml
#   rgpu-server  rgpu-server and its JIT plugin, /etc/rgpu/server.toml, the
#                systemd unit, sysusers.d and tmpfiles.d entries (the postinst
#                makes the user rgpu and /var/lib, /var/log, /var/cache/rgpu)
# Dependencies are the Debian runtime packages the binaries link, found by
# dpkg-shlibdeps (never -dev packages).
install(FILES ${PROJECT_SOURCE_DIR}/packaging/etc/server.toml DESTINATION /etc/rgpu COMPONENT server EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/etc/client.toml DESTINATION /etc/rgpu COMPONENT client EXCLUDE_FROM_ALL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rgpu)
set(CPACK_PACKAGE_VENDOR "rgpu")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "rgpu maintainers <rgpu@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL client server)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_COMPRESSION_TYPE zstd)
set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME rgpu-client)
set(CPACK_DEBIAN_SERVER_PACKAGE_NAME rgpu-server)
set(CPACK_COMPONENT_CLIENT_DESCRIPTION "rgpu client: run unmodified CUDA programs on remote GPUs
 rgpu's libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcurand.so.10,
 libcufft.so.12, libcusolver.so.12, libcusparse.so.12 and libcudnn.so.9
 send every CUDA call over TLS to an rgpu-server on a GPU host. rgpu-run starts a program with
 them; rgpu-smi shows the server's devices and sessions.")
set(CPACK_COMPONENT_SERVER_DESCRIPTION "rgpu server: lend this host's GPUs to CUDA programs on other hosts
 rgpu-server shares the GPUs between remote clients with priorities, quotas
 and per-user device access, Prometheus metrics and a status page; a systemd
 service. Without a GPU it serves simulated devices.")
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS "systemd")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/debian/server/postinst;${PROJECT_SOURCE_DIR}/packaging/debian/server/prerm;${PROJECT_SOURCE_DIR}/packaging/debian/server/postrm;${PROJECT_SOURCE_DIR}/packaging/debian/server/conffiles")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_CLIENT_PACKAGE_CONTROL_EXTRA "${PROJECT_SOURCE_DIR}/packaging/debian/client/conffiles")
set(CPACK_OUTPUT_FILE_PREFIX packages)
include(CPack)
