# Stand-in for python:3.11-slim: Debian 12's Python 3.11 in a venv at /usr/local/python,
# first on PATH, so `python` and `pip install` behave as in the official image. Trusts the
# extra certificate authorities that local-images.sh copied from the host into ca/.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && update-ca-certificates >/dev/null \
    && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:$PATH \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
RUN pip install -q --no-cache-dir --upgrade pip && pip --version
CMD ["python3"]
