# Stand-in for python:3.12-slim-bookworm, for the GPU trainer image (`make gpu-image`):
# Debian 12 has no Python 3.12 package, so local-images.sh stages a Python 3.12 built on a
# Debian 12 host (pyenv's, or PYTHON312=...) into python312/, and it goes to /usr/local as
# in the official image, with the shared libraries its modules load from Debian's packages.
# Trusts the extra certificate authorities that local-images.sh copied from the host.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && apt-get install -y -q --no-install-recommends ca-certificates libssl3 libffi8 \
       libsqlite3-0 zlib1g libbz2-1.0 liblzma5 libreadline8 libncursesw6 libgdbm6 \
       libgdbm-compat4 libuuid1 libnsl2 \
    && rm -rf /var/lib/apt/lists/* \
    && update-ca-certificates >/dev/null
COPY python312/ /usr/local/
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN ldconfig && ln -s python3.12 /usr/local/bin/python3 && ln -s python3.12 /usr/local/bin/python \
    && python3 -m ensurepip --default-pip >/dev/null && ln -sf pip3 /usr/local/bin/pip \
    && python3 -c "import ssl, sqlite3, ctypes, lzma, bz2, zlib, readline, uuid; print('python', __import__('sys').version.split()[0])"
CMD ["python3"]
