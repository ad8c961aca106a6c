package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"cairn.dev/cairn/build/elfdeps"
	"cairn.dev/cairn/build/goprog"
	"cairn.dev/cairn/pkg/ociimage"
)

// An image is one of the suite's images: its repository below the
// registry, its tags (the first is pushed with the image, the others name
// the same manifest) and how it is built.
type image struct {
	repository string
	tags       []string
	build      func(*builder) (*ociimage.Image, error)
}

// ref is the image's name below registry, with its first tag; without a
// registry, the repository and tag alone.
func (i image) ref(registry string) string {
	if registry == "" {
		return i.repository + ":" + i.tags[0]
	}
	return registry + "/" + i.repository + ":" + i.tags[0]
}

// images are the suite's images that can be built here, named and tagged
// as the payload's release of k8s.io/kubernetes/test/utils/image names
// them.
var images = []image{
	{"pause", []string{"3.10.2"}, (*builder).pause},
	{"e2e-test-images/busybox", []string{"1.37.0-2"}, (*builder).busybox},
	// 2.55 is the suite's previous agnhost, which tests that change a
	// workload's image start from: here it is the same build.
	{"e2e-test-images/agnhost", []string{"2.66.1", "2.55"}, (*builder).agnhost},
	// Debian's nginx 1.22, under the suite's two tags of nginx.
	{"e2e-test-images/nginx", []string{"1.27.0-2", "1.28.0-2"}, (*builder).nginx},
	{"e2e-test-images/kitten", []string{"1.8"}, func(b *builder) (*ociimage.Image, error) { return b.webserver("kitten") }},
	{"e2e-test-images/nautilus", []string{"1.8"}, func(b *builder) (*ociimage.Image, error) { return b.webserver("nautilus") }},
	// The DNS tests' glibc resolver: the busybox image with agnhost's
	// tools, dig among them, all linked against Debian's glibc.
	{"e2e-test-images/glibc-dns-testing", []string{"2.1.1"}, (*builder).glibcDNS},
	// The aggregator test's pair: the sample apiserver at the payload's
	// release, and etcd at the release the payload requires (3.7.0).
	{"e2e-test-images/sample-apiserver", []string{"1.29.2"}, func(b *builder) (*ociimage.Image, error) {
		return b.program("k8s.io/sample-apiserver", "/sample-apiserver")
	}},
	{"etcd", []string{"3.7.0-0"}, func(b *builder) (*ociimage.Image, error) { return b.program("./etcd", "/usr/local/bin/etcd") }},
	// The privilege escalation tests' program, which prints its effective
	// user ID: set-user-ID root, as upstream's Dockerfile makes it.
	{"e2e-test-images/nonewprivs", []string{"1.4"}, func(b *builder) (*ociimage.Image, error) {
		prog, err := goprog.Static(b.kube, "k8s.io/kubernetes/test/images/nonewprivs")
		if err != nil {
			return nil, err
		}
		return onBusybox(busyboxTools, ociimage.Config{Cmd: []string{"nnp"}},
			ociimage.File{Path: "/usr/local/bin/nnp", Mode: fs.ModeSetuid | 0o755, Data: prog})
	}},
	// The busybox image run by user 1234, as upstream's Dockerfile says.
	{"e2e-test-images/nonroot", []string{"1.5"}, func(b *builder) (*ociimage.Image, error) {
		return onBusybox(busyboxTools, ociimage.Config{Cmd: []string{"sh"}, User: "1234"})
	}},
}

// pathEnv is the PATH of every image, as upstream's Alpine and busybox
// images set it.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// A tool is a program of the build machine that an image carries with
// its libraries, in place of busybox's applet of its name: at each path
// where busybox would link the applet, or at /usr/bin/NAME if busybox has
// none, a link to it.
type tool struct {
	name, path string
	// pkg, if set, is the Go package of a program built here (envsh),
	// not the build machine's at path.
	pkg string
}

// busyboxTools stand in for busybox 1.35's applets (Debian's) where
// they do not behave as upstream's busybox 1.37, which the suite assumes:
//   - sh is envsh (build/testimages/envsh), built here: ash, but
//     bash for an environment with names that are not identifiers (a
//     test gives a container "1-" and "$_-" prefixed ones), which 1.35's
//     ash drops and 1.37's passes on;
//   - wget is GNU's, as busybox 1.35's crashes with -T;
//   - nc is netcat 1.10 (netcat-traditional), which 1.37's nc copies,
//     -v included.
var busyboxTools = []tool{
	{name: "sh", path: envshPath, pkg: "cairn.dev/cairn/build/testimages/envsh"},
	{name: "bash", path: "/usr/bin/bash"}, {name: "wget", path: "/usr/bin/wget"}, {name: "nc", path: "/bin/nc.traditional"},
}

// envshPath is where the images on busybox carry envsh.
const envshPath = "/usr/bin/envsh"

// agnhostTools are the busybox image's tools, but OpenBSD's nc, and the
// programs agnhost's image carries from Alpine as upstream builds it:
// tests run them in agnhost pods (curl and nc most of all), and getent,
// which Alpine's musl has and the DNS tests run.
var agnhostTools = []tool{
	{name: "sh", path: "/usr/bin/bash"}, {name: "bash", path: "/usr/bin/bash"}, {name: "wget", path: "/usr/bin/wget"},
	{name: "nc", path: "/bin/nc.openbsd"}, {name: "curl", path: "/usr/bin/curl"}, {name: "dig", path: "/usr/bin/dig"},
	{name: "socat", path: "/usr/bin/socat"}, {name: "ip", path: "/usr/sbin/ip"}, {name: "getent", path: "/usr/bin/getent"},
}

// A builder builds the images.
type builder struct {
	// kube is the module of the Kubernetes payload (build/kubernetes).
	kube string
	// agnhostFiles, once built, are the files of agnhost's image.
	agnhostFiles []ociimage.File
	// source is the directory of the Kubernetes release's source, once
	// found.
	source string
}

// pause is Cairn's pause program (build/pause), which the suite's pods
// run as registry.k8s.io/pause.
func (b *builder) pause() (*ociimage.Image, error) {
	prog, err := goprog.Static("", "./build/pause")
	if err != nil {
		return nil, err
	}
	return ociimage.Build([]string{"/pause"}, []ociimage.File{{Path: "/pause", Mode: 0o755, Data: prog}})
}

// busybox is Debian's busybox with every applet it has linked to it but
// those busyboxTools replace, root and nobody in its user database, and
// /tmp, as upstream's busybox image; it runs sh.
func (b *builder) busybox() (*ociimage.Image, error) {
	return onBusybox(busyboxTools, ociimage.Config{Cmd: []string{"sh"}})
}

// onBusybox is an image of Debian's busybox with tools (rootfs), the
// user database and more files, run as c says, with PATH set.
func onBusybox(tools []tool, c ociimage.Config, more ...ociimage.File) (*ociimage.Image, error) {
	files, err := rootfs(tools)
	if err != nil {
		return nil, err
	}
	files = append(append(files, users("")...), more...)
	c.Env = append(slices.Clone(c.Env), pathEnv)
	return ociimage.BuildConfig(c, files)
}

// agnhost is agnhost built at the payload's release, on the busybox
// image with agnhostTools, the porter's certificate and key, /uploads,
// and the user and group its Dockerfile adds; it runs agnhost pause.
func (b *builder) agnhost() (*ociimage.Image, error) {
	files, err := b.agnhostImageFiles()
	if err != nil {
		return nil, err
	}
	return ociimage.BuildConfig(ociimage.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{pathEnv}}, files)
}

// webserverOSRelease is the /etc/os-release of upstream's kitten and
// nautilus images, which they have from agnhost's Alpine base: the
// ImageVolume tests mount the image and read it as a file the image is
// known to hold ("Alpine Linux"). Nothing else of these images is
// Alpine's.
const webserverOSRelease = `NAME="Alpine Linux"
ID=alpine
PRETTY_NAME="Alpine Linux"
HOME_URL="https://alpinelinux.org/"
`

// webserver is the kitten or nautilus image: agnhost's with the
// picture and data.json of test/images/NAME/html and upstream's
// /etc/os-release (webserverOSRelease), running agnhost test-webserver,
// which serves them.
func (b *builder) webserver(name string) (*ociimage.Image, error) {
	files, err := b.agnhostImageFiles()
	if err != nil {
		return nil, err
	}
	files = slices.Clone(files)
	for _, f := range []string{name + ".jpg", "data.json"} {
		data, err := os.ReadFile(filepath.Join(b.source, "test/images", name, "html", f))
		if err != nil {
			return nil, fmt.Errorf("when reading %s's %s: %w", name, f, err)
		}
		files = append(files, ociimage.File{Path: "/" + f, Mode: 0o644, Data: data})
	}
	files = append(files, ociimage.File{Path: "/etc/os-release", Mode: 0o644, Data: []byte(webserverOSRelease)})
	return ociimage.BuildConfig(ociimage.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}, Env: []string{pathEnv}}, files)
}

// nginx is Debian's nginx on the busybox image, serving a welcome page on
// port 80 with its logs on the container's output, as upstream's nginx
// image does. The package is downloaded and unpacked, not installed:
// installing it would start nginx on this machine.
func (b *builder) nginx() (*ociimage.Image, error) {
	dir, err := os.MkdirTemp("", "testimages-nginx")
	if err != nil {
		return nil, fmt.Errorf("when making a download directory: %w", err)
	}
	defer os.RemoveAll(dir)
	download := exec.Command("apt-get", "download", "nginx")
	download.Dir = dir
	if out, err := download.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("when downloading Debian's nginx: %w: %s", err, bytes.TrimSpace(out))
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "nginx_*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download nginx left %q, want one package", debs)
	}
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], filepath.Join(dir, "root")).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("when unpacking %s: %w: %s", debs[0], err, bytes.TrimSpace(out))
	}
	unpacked := filepath.Join(dir, "root/usr/sbin/nginx")
	program, err := hostFiles([]string{unpacked})
	if err != nil {
		return nil, err
	}
	for i := range program {
		if program[i].Path == unpacked {
			program[i].Path = "/usr/sbin/nginx"
		}
	}
	base, err := rootfs(busyboxTools)
	if err != nil {
		return nil, err
	}
	files := union(base, users(""), program, []ociimage.File{
		{Path: "/etc/nginx/nginx.conf", Mode: 0o644, Data: []byte(nginxConf)},
		{Path: "/usr/share/nginx/html/index.html", Mode: 0o644, Data: []byte(nginxWelcome)},
		{Path: "/var/lib/nginx", Mode: fs.ModeDir | 0o755},
		{Path: "/var/log/nginx", Mode: fs.ModeDir | 0o755},
		{Path: "/run", Mode: fs.ModeDir | 0o755},
	})
	return ociimage.BuildConfig(ociimage.Config{Cmd: []string{"nginx", "-g", "daemon off;"}, Env: []string{pathEnv}}, files)
}

// nginxConf serves /usr/share/nginx/html on port 80, as upstream's
// image's default configuration does.
const nginxConf = `user nobody nobody;
worker_processes 1;
pid /run/nginx.pid;
events {
	worker_connections 1024;
}
http {
	types {
		text/html html;
		text/plain txt;
		application/json json;
		image/jpeg jpg;
	}
	default_type application/octet-stream;
	access_log /dev/stdout;
	server {
		listen 80;
		location / {
			root /usr/share/nginx/html;
			index index.html;
		}
	}
}
`

// nginxWelcome is the page nginx serves, titled as upstream's is.
const nginxWelcome = `<!DOCTYPE html>
<html>
<head><title>Welcome to nginx!</title></head>
<body><h1>Welcome to nginx!</h1><p>Debian's nginx, in a test image of Cairn.</p></body>
</html>
`

// union joins sets of files; a path already there is not added again
// (the libraries two programs share).
func union(sets ...[]ociimage.File) []ociimage.File {
	have := map[string]bool{}
	var out []ociimage.File
	for _, set := range sets {
		for _, f := range set {
			if !have[f.Path] {
				have[f.Path] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// glibcDNS is the busybox image with agnhostTools: the DNS tests run dig
// in it, with glibc's resolver (upstream's is Debian with dnsutils).
func (b *builder) glibcDNS() (*ociimage.Image, error) {
	return onBusybox(agnhostTools, ociimage.Config{Cmd: []string{"sh"}})
}

// program is the package pkg of the payload's module, built, at path on
// the busybox image; it runs the program.
func (b *builder) program(pkg, path string) (*ociimage.Image, error) {
	prog, err := goprog.Static(b.kube, pkg)
	if err != nil {
		return nil, err
	}
	return onBusybox(busyboxTools, ociimage.Config{Entrypoint: []string{path}}, ociimage.File{Path: path, Mode: 0o755, Data: prog})
}

// agnhostImageFiles are the files of agnhost's image, built once.
func (b *builder) agnhostImageFiles() ([]ociimage.File, error) {
	if b.agnhostFiles != nil {
		return b.agnhostFiles, nil
	}
	prog, err := goprog.Static(b.kube, "k8s.io/kubernetes/test/images/agnhost")
	if err != nil {
		return nil, err
	}
	if b.source, err = moduleDir(b.kube, "k8s.io/kubernetes"); err != nil {
		return nil, err
	}
	files, err := rootfs(agnhostTools)
	if err != nil {
		return nil, err
	}
	files = append(files,
		ociimage.File{Path: "/agnhost", Mode: 0o755, Data: prog},
		ociimage.File{Path: "/agnhost-2", Mode: fs.ModeSymlink | 0o777, Link: "agnhost"},
		ociimage.File{Path: "/uploads", Mode: fs.ModeDir | 0o755},
	)
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		data, err := os.ReadFile(filepath.Join(b.source, "test/images/agnhost/porter", name))
		if err != nil {
			return nil, fmt.Errorf("when reading the porter's %s: %w", name, err)
		}
		files = append(files, ociimage.File{Path: "/" + name, Mode: 0o644, Data: data})
	}
	b.agnhostFiles = append(files, users("user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")...)
	return b.agnhostFiles, nil
}

// rootfs is the build machine's /bin/busybox (Debian's) and tools (those
// built here as they are), with
// everything the loader needs to start them (elfdeps), each at its own
// path; a link at each path busybox's applet list names and at /bin/NAME,
// to busybox or to the tool that replaces the applet; and /tmp and /root.
func rootfs(tools []tool) ([]ociimage.File, error) {
	const busybox = "/bin/busybox"
	programs := []string{busybox}
	replaced := map[string]string{}
	var built []ociimage.File
	for _, t := range tools {
		replaced[t.name] = t.path
		if t.pkg != "" {
			prog, err := goprog.Static("", t.pkg)
			if err != nil {
				return nil, err
			}
			built = append(built, ociimage.File{Path: t.path, Mode: 0o755, Data: prog})
			continue
		}
		programs = append(programs, t.path)
	}
	files, err := hostFiles(programs)
	if err != nil {
		return nil, err
	}
	files = append(files, built...)
	list, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("when listing busybox's applets: %w", err)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	link := func(at, to string) {
		if !have[at] {
			have[at] = true
			files = append(files, ociimage.File{Path: at, Mode: fs.ModeSymlink | 0o777, Link: to})
		}
	}
	linked := map[string]bool{}
	for _, applet := range strings.Fields(string(list)) {
		name := filepath.Base(applet)
		to, ok := replaced[name]
		if ok {
			linked[name] = true
		} else {
			to = busybox
		}
		// At Debian's path, and in /bin as well, as upstream's image
		// has every applet: the tests run /bin/sysctl, which Debian
		// puts in /sbin.
		link("/"+applet, to)
		link("/bin/"+name, to)
	}
	for _, t := range tools {
		if !linked[t.name] {
			link("/usr/bin/"+t.name, t.path)
		}
	}
	return append(files,
		ociimage.File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		ociimage.File{Path: "/root", Mode: fs.ModeDir | 0o700},
	), nil
}

// users are /etc/passwd and /etc/group with root and nobody, and more
// (passwd lines; each user has a group of its own ID and name, and
// belongs to group-defined-in-image too).
func users(more string) []ociimage.File {
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n" + more
	group := "root:x:0:\nnobody:x:65534:\n"
	var members []string
	for _, line := range strings.Split(strings.TrimSpace(more), "\n") {
		if f := strings.Split(line, ":"); len(f) == 7 {
			group += f[0] + ":x:" + f[3] + ":\n"
			members = append(members, f[0])
		}
	}
	if len(members) > 0 {
		group += "group-defined-in-image:x:50000:" + strings.Join(members, ",") + "\n"
	}
	return []ociimage.File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
	}
}

// hostFiles are the build machine's programs at paths, with everything
// the loader needs to start them (elfdeps), each at its own path.
func hostFiles(paths []string) ([]ociimage.File, error) {
	closure, err := elfdeps.Resolve(paths)
	if err != nil {
		return nil, fmt.Errorf("when resolving %s (build/deps.sh conformance installs them): %w", strings.Join(paths, " "), err)
	}
	var files []ociimage.File
	for _, f := range closure.Files {
		if f.Link != "" {
			files = append(files, ociimage.File{Path: f.Path, Mode: fs.ModeSymlink | 0o777, Link: f.Link})
			continue
		}
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("when reading %s: %w", f.Path, err)
		}
		files = append(files, ociimage.File{Path: f.Path, Mode: f.Mode.Perm(), Data: data})
	}
	return files, nil
}

// moduleDir is the directory of module mod as the module in dir
// requires it.
func moduleDir(dir, mod string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("when finding the source of %s: %w: %s", mod, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}
