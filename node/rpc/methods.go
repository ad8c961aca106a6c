package rpc

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"cairn.dev/cairn/proto/api"
)

// apiPackage is the protobuf package whose services ListMethods lists.
const apiPackage protoreflect.FullName = "cairn.api"

// Method is one RPC with the class of caller it admits, as its proto
// declares it.
type Method struct {
	// Name is the method's gRPC name, "/cairn.api.Management/GetNodes":
	// what a client dials and what interceptors see as FullMethod.
	Name string
	// Authz is the class of caller the method admits.
	// AUTHORIZATION_UNSPECIFIED means the method declares none and is
	// refused to everyone.
	Authz api.Authorization
	// ClientStream is set when the client sends a stream of messages.
	ClientStream bool
	// ServerStream is set when the server sends a stream of messages.
	ServerStream bool
}

// ListMethods returns every RPC of Cairn's public services (the cairn.api
// protobuf package), sorted by name, each with its authorization class.
// Tests enumerate it so that no RPC escapes an authorization matrix: a new
// RPC, or a new service, appears here as soon as its generated code is
// linked in.
func ListMethods() []Method {
	var methods []Method
	protoregistry.GlobalFiles.RangeFilesByPackage(apiPackage, func(fd protoreflect.FileDescriptor) bool {
		services := fd.Services()
		for i := 0; i < services.Len(); i++ {
			ms := services.Get(i).Methods()
			for j := 0; j < ms.Len(); j++ {
				methods = append(methods, methodOf(ms.Get(j)))
			}
		}
		return true
	})
	sort.Slice(methods, func(i, j int) bool { return methods[i].Name < methods[j].Name })
	return methods
}

// LookupMethod finds the RPC of a gRPC method name ("/package.Service/Method")
// in the protobuf registry and reads its authorization class.
func LookupMethod(name string) (Method, error) {
	service, method, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/")
	if !ok || !strings.HasPrefix(name, "/") || service == "" || method == "" {
		return Method{}, fmt.Errorf("%q is not a gRPC method name", name)
	}
	full := protoreflect.FullName(service + "." + method)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(full)
	if err != nil {
		return Method{}, fmt.Errorf("when looking up %s: %w", full, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return Method{}, fmt.Errorf("%s is not a method", full)
	}
	return methodOf(md), nil
}

// methodOf reads a method descriptor's gRPC name and authorization option.
func methodOf(md protoreflect.MethodDescriptor) Method {
	m := Method{
		Name:         fmt.Sprintf("/%s/%s", md.Parent().FullName(), md.Name()),
		ClientStream: md.IsStreamingClient(),
		ServerStream: md.IsStreamingServer(),
	}
	if opts := md.Options(); opts != nil {
		// A missing option reads as the enum's zero value, which is the
		// refusing AUTHORIZATION_UNSPECIFIED.
		m.Authz, _ = proto.GetExtension(opts, api.E_Authz).(api.Authorization)
	}
	return m
}
