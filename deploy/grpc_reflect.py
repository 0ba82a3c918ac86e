#!/usr/bin/python3
"""A small grpcurl stand-in that knows no .proto file: everything it sends and
prints is described by the server's reflection service.

  grpc_reflect.py [OPTIONS] ADDR list
  grpc_reflect.py [OPTIONS] ADDR call SERVICE/METHOD JSON   (one JSON object
                                                             per reply)
OPTIONS, as sdgctl's: --tls (system roots), --tls_ca FILE, --tls_cert FILE
--tls_key FILE (mTLS), --tls_server_name NAME, --token_file FILE (else the
SDG_TOKEN environment variable; sent as "authorization: Bearer TOKEN").

deploy/smoke.sh uses it where grpcurl is not installed (grpcurl is not
packaged in Debian 12). Needs Debian's python3-grpcio and python3-protobuf,
and protoc with grpc's reflection.proto (protobuf-compiler, grpc-proto) to
build the reflection client itself.
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from google.protobuf import message_factory

REFLECTION_PROTO = "grpc/reflection/v1alpha/reflection.proto"
PROTO_ROOT = "/usr/share/grpc-proto"


def _load(out):
    # The generated module lives under grpc/..., which would clash with the
    # grpc package; load it from its file instead.
    path = os.path.join(out, REFLECTION_PROTO.replace(".proto", "_pb2.py"))
    spec = importlib.util.spec_from_file_location("reflection_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Reflection:
    def __init__(self, channel, metadata):
        self.pb = _load_reflection()
        self.metadata = metadata
        self.call = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=self.pb.ServerReflectionRequest.SerializeToString,
            response_deserializer=self.pb.ServerReflectionResponse.FromString)

    def ask(self, **request):
        replies = list(self.call(iter([self.pb.ServerReflectionRequest(**request)]),
                                 timeout=30, metadata=self.metadata))
        reply = replies[0]
        if reply.HasField("error_response"):
            raise RuntimeError(reply.error_response.error_message)
        return reply

    def services(self):
        reply = self.ask(list_services="")
        return [s.name for s in reply.list_services_response.service]

    def pool_for(self, symbol):
        pool = descriptor_pool.DescriptorPool()
        reply = self.ask(file_containing_symbol=symbol)
        files = {}
        for raw in reply.file_descriptor_response.file_descriptor_proto:
            proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
            files[proto.name] = proto
        # Dependencies first; ask for any the server did not send.
        added = set()

        def add(name):
            if name in added:
                return
            if name not in files:
                more = self.ask(file_by_filename=name)
                for raw in more.file_descriptor_response.file_descriptor_proto:
                    proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
                    files.setdefault(proto.name, proto)
            for dependency in files[name].dependency:
                add(dependency)
            pool.Add(files[name])
            added.add(name)

        for name in list(files):
            add(name)
        return pool


_REFLECTION = None


def _load_reflection():
    global _REFLECTION
    if _REFLECTION is None:
        out = tempfile.mkdtemp(prefix="grpc-reflect-")
        subprocess.run(["protoc", f"-I{PROTO_ROOT}", f"--python_out={out}",
                        os.path.join(PROTO_ROOT, REFLECTION_PROTO)], check=True)
        _REFLECTION = _load(out)
    return _REFLECTION


def call(channel, reflection, full_method, request_json, metadata):
    service_name, method_name = full_method.split("/")
    pool = reflection.pool_for(service_name)
    service = pool.FindServiceByName(service_name)
    method = service.methods_by_name[method_name]
    factory = message_factory.MessageFactory(pool)
    request_class = factory.GetPrototype(method.input_type)
    response_class = factory.GetPrototype(method.output_type)
    request = json_format.Parse(request_json, request_class())
    path = f"/{service_name}/{method_name}"
    kwargs = dict(request_serializer=request_class.SerializeToString,
                  response_deserializer=response_class.FromString)
    if method.server_streaming:
        replies = channel.unary_stream(path, **kwargs)(
            request, timeout=300, metadata=metadata)
    else:
        replies = [channel.unary_unary(path, **kwargs)(
            request, timeout=60, metadata=metadata)]
    for reply in replies:
        print(json_format.MessageToJson(reply, indent=2), flush=True)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _channel(args):
    if not (args.tls or args.tls_ca or args.tls_cert or args.tls_key):
        return grpc.insecure_channel(args.addr)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(args.tls_ca) if args.tls_ca else None,
        private_key=_read(args.tls_key) if args.tls_key else None,
        certificate_chain=_read(args.tls_cert) if args.tls_cert else None)
    options = []
    if args.tls_server_name:
        options.append(("grpc.ssl_target_name_override", args.tls_server_name))
    return grpc.secure_channel(args.addr, credentials, options=options)


def _metadata(args):
    token = os.environ.get("SDG_TOKEN", "")
    if args.token_file:
        token = _read(args.token_file).decode().strip()
    return [("authorization", f"Bearer {token}")] if token else []


def main():
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("--tls", action="store_true")
    for flag in ("tls_ca", "tls_cert", "tls_key", "tls_server_name",
                 "token_file"):
        parser.add_argument(f"--{flag}", default="")
    parser.add_argument("addr")
    parser.add_argument("command", choices=("list", "call"))
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args()
    if args.command == "call" and len(args.rest) != 2:
        sys.exit(__doc__)
    channel = _channel(args)
    metadata = _metadata(args)
    reflection = Reflection(channel, metadata)
    try:
        if args.command == "list":
            for name in reflection.services():
                print(name)
        else:
            call(channel, reflection, args.rest[0], args.rest[1], metadata)
    except grpc.RpcError as error:
        sys.exit(f"ERROR: {error.code().name}: {error.details()}")


if __name__ == "__main__":
    main()
