# Cairn's build. The README's two commands are `make cluster` and `make test`;
# everything else here is a step of those two or a developer's shortcut.

GO ?= go
OUT ?= out
# Tools fetched through the Go module proxy, pinned here and nowhere else.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all deps build test test-long unit e2e lint bench image cluster proto clean cairnctl release conformance

all: build

# deps installs the Debian packages a fresh machine lacks; a no-op otherwise.
# Every target that runs a tool or reads a file of such a package depends on
# it, so that a fresh clone needs nothing installed by hand but Go.
deps:
	@./build/deps.sh

build:
	$(GO) build ./...

# make test runs every test: the unit tests under the race detector, then the
# qemu end-to-end suites against a freshly built image.
test: deps
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory e2e

# make test-long is make test with the full matrix of the e2e suites that
# have one (their -long flag): TestPowerCut cuts the power at every step
# of node/testpoint instead of two; TestNetworkChaos also reboots every
# node in turn on its impaired network.
test-long: deps
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory e2e E2E_FLAGS=-long E2E_TIMEOUT=90m

# The test hooks of /init (build tag cairntest) are tested on their own.
# The programs the conformance test images carry are installed first, so
# that build/testimages' tests build the busybox image rather than skip.
unit: deps
	@./build/deps.sh conformance
	$(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 -tags cairntest ./cmd/init ./node/testhooks ./node/testpoint

# CHAOS, when set, is a network profile for make cluster and make e2e: the
# nodes are joined by the harness's own switch (test/launch/l2switch), which
# impairs every link as the profile says, such as
# CHAOS=delay=50ms,jitter=20ms,loss=2%,dup=0.5%,reorder=0.5%,seed=42
# (launch-cluster -net-chaos, CAIRN_NET_CHAOS for the suites). Empty keeps
# the kernel's bridge; TestNetworkChaos has a profile of its own.
CHAOS ?=

# e2e boots the fresh image in qemu: the suites of test/e2e, in parallel,
# each with its own deadline and a table of boot phase timings; then the
# Kubernetes suite alone, as an emulated apiserver that shares the machine's
# two cores with another suite's nodes misses its own start-up deadlines.
# The suites share the machine by the nodes they run (-nodes-at-once, 4 by
# default; the three-node suites one at a time), so -parallel only lets
# them all ask.
# E2E_FLAGS are handed to the suites (-long for their full matrices). A
# failed suite leaves out/e2e/<suite>.failed.txt, its nodes' last milestones
# and its timings, printed at the very end.
E2E_TIMEOUT ?= 50m
E2E_FLAGS ?=
E2E_SERIAL := ^TestKubernetes$$
E2E_RUN = $(if $(CHAOS),CAIRN_NET_CHAOS='$(CHAOS)') $(GO) test -tags e2e -count=1 -v -parallel 32 -timeout $(E2E_TIMEOUT) ./test/e2e/... \
	  -image-dir $(abspath $(OUT)) -cairnctl $(abspath $(OUT))/cairnctl -release-key $(abspath $(RELEASE_KEY)) $(E2E_FLAGS)
e2e: deps image test-image cairnctl kube-payload-test registry testagent-image node-tests release test-ukis
	@start=$$(date +%s); rm -f $(OUT)/e2e/*.failed.txt; \
	  $(E2E_RUN) -skip '$(E2E_SERIAL)'; rc=$$?; \
	  echo "e2e: the parallel suites took $$(( $$(date +%s) - start )) s"; mid=$$(date +%s); \
	  $(E2E_RUN) -run '$(E2E_SERIAL)' || rc=1; \
	  echo "e2e: the Kubernetes suite took $$(( $$(date +%s) - mid )) s"; \
	  echo "e2e: took $$(( $$(date +%s) - start )) s"; \
	  for f in $(OUT)/e2e/*.failed.txt; do [ -f "$$f" ] && echo "e2e: where the failed suite's nodes got to ($$f):" && cat "$$f"; done; \
	  exit $$rc

# The packages whose unit tests need what only a node has (project quotas
# on the data partition's XFS, a cgroup v2 hierarchy): their test
# binaries, static, which the e2e suite TestPackagesInNode runs inside a
# node. On the build machine these tests skip where its kernel lacks what
# they need, and say so.
NODE_TEST_PKGS := ./pkg/cgroup ./pkg/fsquota ./node/kubernetes/localvolume ./node/kubernetes/csiplugin
.PHONY: node-tests
node-tests:
	@rm -rf $(OUT)/nodetests && mkdir -p $(OUT)/nodetests && \
	  CGO_ENABLED=0 $(GO) test -c -o $(OUT)/nodetests/ $(NODE_TEST_PKGS)

lint: proto-check
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags cairntest ./cmd/init ./node/testhooks ./node/testpoint
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags cairntest ./cmd/init ./node/testhooks ./node/testpoint

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/... ./node/kubernetes

# bench-scale runs three in-process curators with 1000 simulated nodes that
# register, are approved and heartbeat, next to raw etcd puts for the ratio.
.PHONY: bench-scale
bench-scale:
	$(GO) test -run '^$$' -bench Scale -benchtime=1x -timeout 20m ./node/curator

# bench-boot boots cairn.img and the null image five times each through
# OVMF, as make cluster boots a node (a fresh copy of the image, a new TPM),
# again without the TPM, and again with it under Secure Boot, and prints
# every boot phase's min / median / max, Cairn's cost against the null
# image's floor, the TPM's cost and Secure Boot's.
.PHONY: bench-boot
bench-boot: deps image null-image
	$(GO) run ./test/bootbench -image-dir $(OUT) -boots 5

# bench-apiserver starts the payload's kube-apiserver on this machine,
# natively, five times, each with a controller's arguments against a fresh
# embedded etcd, and prints the time to /readyz ok and the CPU it spent:
# its start in seconds, where a VM of make cluster takes minutes.
.PHONY: bench-apiserver
bench-apiserver: deps kube-payload
	$(GO) run ./test/apiserverbench -bin $(KUBE_BIN)/kube-apiserver -runs 5

# bench-failover boots a three-node cluster of consensus members, loads the
# machine with one busy process per core beside the nodes, counts false
# elections (curator and etcd) for SOAK, then kills the curator leader's VM
# and times until another leads and Management is served again.
SOAK ?= 10m
.PHONY: bench-failover
bench-failover: deps image cairnctl
	$(GO) test -tags e2e -count=1 -v -timeout 60m -run '^TestFailoverSoak$$' ./test/e2e \
	  -image-dir $(abspath $(OUT)) -cairnctl $(abspath $(OUT))/cairnctl -soak $(SOAK)

# bench-idle forms the cluster of make cluster with Kubernetes, runs a pause
# pod on each worker under a NetworkPolicy, checks the resource metrics API
# answers, leaves it at rest for IDLE, then reads every node's busy time and
# each process's memory (PSS) and CPU over IDLE_OVER: the footprint goals'
# figures.
IDLE ?= 10m
IDLE_OVER ?= 5m
.PHONY: bench-idle
bench-idle: deps image cairnctl kube-payload
	$(GO) test -tags e2e -count=1 -v -timeout 60m -run '^TestIdleFootprint$$' ./test/e2e \
	  -image-dir $(abspath $(OUT)) -cairnctl $(abspath $(OUT))/cairnctl -idle $(IDLE) -idle-over $(IDLE_OVER)

# bench-churn forms the cluster of make cluster with Kubernetes, starts
# CHURN pause pods at once across the workers, then deletes them: the load
# of the conformance tests that start 100 pods (CHURN=100 takes over an
# hour under emulation). It prints how long until
# all were Ready and all were gone, when a worker's Node was not Ready,
# the apiserver's requests, lease latency and etcd calls meanwhile, and
# where each node's CPU time went.
CHURN ?= 40
.PHONY: bench-churn
bench-churn: deps image cairnctl kube-payload
	$(GO) test -tags e2e -count=1 -v -timeout 90m -run '^TestChurn$$' ./test/e2e \
	  -image-dir $(abspath $(OUT)) -cairnctl $(abspath $(OUT))/cairnctl -churn $(CHURN)

# cairnctl is the operator's CLI, built for this machine.
cairnctl:
	$(GO) build -o $(OUT)/cairnctl ./cmd/cairnctl

# make cluster boots a three-node cluster from the fresh image: node 0
# bootstraps it, cairnctl takes ownership, the others register and are
# approved; it prints the cairnctl command lines that reach the cluster and
# stays up until Ctrl-C powers every node down. The launcher is built first
# so that Ctrl-C reaches it directly (qemu runs in process groups of its own).
# The release of the image it boots is pushed to the cluster's registry as
# cairn/release:<version>, for trying an update.
cluster: deps image cairnctl registry testagent-image release
	$(GO) build -o $(OUT)/launch-cluster ./cmd/launch-cluster
	$(OUT)/launch-cluster -n 3 -image $(OUT)/cairn.img -cairnctl $(OUT)/cairnctl -dir $(OUT)/cluster \
	  -registry $(OUT)/registry -push $(OUT)/testagent.oci.tar,$(OUT)/release.oci.tar \
	  $(if $(CHAOS),-net-chaos '$(CHAOS)')

# The harness's registry and the image it serves (make cluster, the
# Kubernetes suite): the stock OCI distribution registry, built from source
# through the module proxy at the version pinned here (go install leaves an
# up-to-date binary alone), and the test agent (build/testagent), packed
# like the pause image.
REGISTRY_PKG := github.com/distribution/distribution/v3/cmd/registry@v3.1.2
.PHONY: registry testagent-image
registry:
	@mkdir -p $(OUT) && GOBIN=$(abspath $(OUT)) CGO_ENABLED=0 $(GO) install -trimpath -ldflags='-s -w' $(REGISTRY_PKG)

testagent-image:
	@$(GO) run ./build/pauseimage -pkg ./build/testagent -path /agent -ref docker.io/cairn/agent:1 -out $(OUT)/testagent.oci.tar

# The boot image (build/README.md). `make image` builds out/cairn.img, a GPT
# disk whose ESP holds one unified kernel image and whose system-a slot holds
# the verified system image, and the pieces of that image for the direct
# -kernel fast path; `make null-image` the same with a /init that only powers
# off and empty system slots, the floor for boot benchmarks. Every rule
# depends on exactly what it reads, so a second `make image` does no work
# but the kernel lookup; out/kernel-version is rewritten only when Debian's
# current kernel changes, and everything built from the kernel depends on it.
IMAGE_CACHE := .cache/image
# The Kubernetes payload (make kube-payload).
KUBE_BIN := $(OUT)/kubernetes/bin
KERNEL_CACHE := .cache/kernel
EFI_STUB ?= /usr/lib/systemd/boot/efi/linuxx64.efi.stub
# INIT_BIN may name a prebuilt static /init instead of building cmd/init.
INIT_BIN ?= $(IMAGE_CACHE)/init
# The release version (pkg/release): X.Y.Z on a commit tagged vX.Y.Z, else
# 0.0.0-<commit time>-<commit>[.dirty]. build/release computes it from git
# into out/version, rewritten only when it changes; /init, the UKI and the
# release are built from that file. VERSION=X.Y.Z overrides it.
VERSION ?=
VERSION_FILE := $(OUT)/version
RELEASE_TOOL := $(IMAGE_CACHE)/release
MKIMAGE := $(IMAGE_CACHE)/mkimage
KERNEL_VERSION := $(OUT)/kernel-version
# The kernel's release and its unpacked package, read when a recipe runs.
KREL = $$(cut -d' ' -f1 $(KERNEL_VERSION))
KDIR = $(KERNEL_CACHE)/$$(tr ' ' _ <$(KERNEL_VERSION))
# $(wildcard) drops files deleted from the work tree but not yet from git.
# build/kubernetes is a module of its own that mkimage does not import.
# build/release is a tool of its own, which mkimage does not import either.
# mkimage imports packages of pkg (the GPT and verity writers): a change
# there builds it again.
BUILD_GO := $(wildcard $(shell git ls-files -co --exclude-standard 'build/*.go' 'pkg/*.go' | grep -v -e '_test\.go$$' -e '^build/kubernetes/' -e '^build/release/'))
NODE_GO := $(wildcard $(shell git ls-files -co --exclude-standard '*.go' | grep -v -e '_test\.go$$' -e '^build/' -e '^test/'))

.PHONY: null-image test-image FORCE

image: $(OUT)/cairn.img $(OUT)/vmlinuz $(OUT)/initramfs.img $(OUT)/cmdline $(OUT)/system.img $(KERNEL_VERSION)

# test-image is the initramfs of a /init with the test hooks (build tag
# cairntest: node/testhooks, the cairn.test.* kernel flags). Only the
# e2e suites that need a hook boot it, directly with out/vmlinuz; the disk
# image and every other suite carry the production /init.
test-image: image $(OUT)/initramfs-test.img

null-image: $(OUT)/null.img $(OUT)/null-initramfs.img

$(KERNEL_VERSION): FORCE | deps
	@build/kernel.sh $(KERNEL_CACHE) $@

$(MKIMAGE): $(BUILD_GO) go.mod go.sum
	@echo "image: building mkimage"
	@mkdir -p $(@D) && $(GO) build -o $@ ./build/mkimage

# /init is stripped of its symbol table and DWARF (-s -w): it halves the
# compressed initramfs, which firmware loads byte by byte at every boot.
# Panics still print full stack traces (Go keeps its own line tables).
$(IMAGE_CACHE)/init: $(NODE_GO) go.mod go.sum $(VERSION_FILE)
	@echo "image: building /init (cmd/init)"
	@mkdir -p $(@D) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.buildVersion=$$(cat $(VERSION_FILE))" -o $@ ./cmd/init

$(IMAGE_CACHE)/init-test: $(NODE_GO) go.mod go.sum $(VERSION_FILE)
	@echo "image: building the test /init (cmd/init, tag cairntest)"
	@mkdir -p $(@D) && CGO_ENABLED=0 $(GO) build -tags cairntest -trimpath -ldflags "-s -w -X main.buildVersion=$$(cat $(VERSION_FILE))" -o $@ ./cmd/init

# build/release, built like mkimage; it also reads these libraries.
RELEASE_GO := $(filter-out %_test.go,$(wildcard build/release/*.go pkg/release/*.go pkg/ociimage/*.go pkg/verity/*.go pkg/cmdline/*.go))
$(RELEASE_TOOL): $(BUILD_GO) $(RELEASE_GO) go.mod go.sum
	@mkdir -p $(@D) && $(GO) build -o $@ ./build/release

$(VERSION_FILE): $(RELEASE_TOOL) FORCE
	@$(RELEASE_TOOL) -version-out $@ $(if $(VERSION),-version $(VERSION))

$(IMAGE_CACHE)/nullinit: build/nullinit/main.go go.mod
	@mkdir -p $(@D) && CGO_ENABLED=0 $(GO) build -trimpath -o $@ ./build/nullinit

$(OUT)/vmlinuz: $(KERNEL_VERSION)
	@cp "$(KDIR)/boot/vmlinuz-$(KREL)" $@ && echo "image: vmlinuz $(KREL)"

# Files that Debian packages provide are made by installing the packages:
# make looks for a prerequisite before it runs any recipe that needs it.
$(EFI_STUB): | deps
	@test -e $@ || { echo "image: $@ is still missing after build/deps.sh"; exit 1; }

# The system image (build/system): an EROFS filesystem of the host binaries
# (system.HostBinaries) and their libraries, then its dm-verity hash tree.
# One step writes it and out/cmdline, build/cmdline with the slot and the
# verity parameters appended, so the UKI's command line pins the image.
# mkimage names every host file it read in a make rule, so a changed binary
# or library (a Debian update) rebuilds the image.
#
# The image carries the Kubernetes payload (kube-payload) at
# /system/kubernetes/bin; WITH_KUBERNETES=0 leaves it out, for a quick
# image of the node alone. The stamp records the choice, so that changing
# it rebuilds the image; the payload's files are named in system.d like
# the host binaries, and Go leaves an up-to-date binary untouched, so a
# rebuild of the payload that changed nothing rebuilds nothing here.
WITH_KUBERNETES ?= 1
KUBE_ON := $(filter-out 0,$(WITH_KUBERNETES))
KUBE_STAMP := $(IMAGE_CACHE)/with-kubernetes

$(KUBE_STAMP): FORCE
	@mkdir -p $(@D); echo "$(KUBE_ON)" | cmp -s - $@ || echo "$(KUBE_ON)" >$@

$(OUT)/system.img $(OUT)/cmdline &: $(MKIMAGE) build/cmdline $(KUBE_STAMP) $(KERNEL_VERSION) | deps $(if $(KUBE_ON),kube-payload)
	@mkdir -p $(@D) && $(MKIMAGE) system -cmdline build/cmdline -cmdline-out $(OUT)/cmdline \
	  -kernel "$(KDIR)" -release "$(KREL)" \
	  $(if $(KUBE_ON),-kubernetes $(KUBE_BIN)) -deps $(IMAGE_CACHE)/system.d -o $(OUT)/system.img

-include $(IMAGE_CACHE)/system.d

$(OUT)/initramfs.img: $(MKIMAGE) $(INIT_BIN) $(KERNEL_VERSION)
	@$(MKIMAGE) initramfs -kernel "$(KDIR)" -release "$(KREL)" -init $(INIT_BIN) -o $@

$(OUT)/initramfs-test.img: $(MKIMAGE) $(IMAGE_CACHE)/init-test $(KERNEL_VERSION)
	@$(MKIMAGE) initramfs -kernel "$(KDIR)" -release "$(KREL)" -init $(IMAGE_CACHE)/init-test \
	  -name initramfs-test -o $@

$(OUT)/null-initramfs.img: $(MKIMAGE) $(IMAGE_CACHE)/nullinit
	@$(MKIMAGE) initramfs -modules=false -system-links=false -name null-initramfs -init $(IMAGE_CACHE)/nullinit -o $@

# Secure Boot (docs/security.md): out/cairn.efi is signed for it
# (Authenticode, with sbsign) by SECUREBOOT_KEY and SECUREBOOT_CERT, an
# RSA-2048 key as firmware takes. A development build signs with Debian's
# snakeoil key from the ovmf package, the one that package's Secure Boot
# variables (OVMF_VARS_4M.snakeoil.fd) trust, so that tests boot it under
# Secure Boot; a release passes its own. The package keeps that key
# encrypted, with the passphrase its README.Debian gives, and sbsign asks
# for none: the build keeps a plain copy in the git-ignored .cache.
# null.efi, the boot benchmark's image, is signed too, so that the
# benchmark boots both under Secure Boot.
SNAKEOIL_KEY := /usr/share/ovmf/PkKek-1-snakeoil.key
SECUREBOOT_KEY ?= .cache/secureboot/snakeoil.key
SECUREBOOT_CERT ?= /usr/share/ovmf/PkKek-1-snakeoil.pem

.cache/secureboot/snakeoil.key: $(SNAKEOIL_KEY)
	@mkdir -p $(@D) && (umask 077 && openssl pkey -in $< -passin pass:snakeoil -out $@)

# Measured boot (pkg/tpmseal, docs/security.md): every UKI carries the
# release's PCR key (.pcrpkey) and that key's signature of the PCR 11 value
# its stub measures (.pcrsig). A node under Secure Boot binds its sealed
# configuration to the key, so that any UKI the key signed unseals it and
# no other. PCR_KEY is an RSA-2048 key, as TPMs verify; a development
# build makes its own on first use, in the git-ignored .cache, and a
# release passes its own.
PCR_KEY ?= .cache/release/dev-pcr.key
# A release that rotates the PCR key passes the key it replaces as
# PCR_KEY_PREVIOUS: its UKI carries the signatures of both, so that nodes
# whose seals trust the old key open them, and seal them again for both.
PCR_KEY_PREVIOUS ?=
PCR_KEY_FLAGS = -pcr-key $(PCR_KEY) $(if $(PCR_KEY_PREVIOUS),-pcr-key $(PCR_KEY_PREVIOUS))

.cache/release/dev-pcr.key .cache/release/test-pcr-2.key:
	@mkdir -p $(@D) && (umask 077 && openssl genrsa -out $@ 2048 2>/dev/null)

# sign-uki signs $@.unsigned for Secure Boot into $@.
sign-uki = sbsign --key $(SECUREBOOT_KEY) --cert $(SECUREBOOT_CERT) --output $@ $@.unsigned >/dev/null && rm $@.unsigned

$(OUT)/cairn.efi $(OUT)/null.efi: $(OUT)/%.efi: $(MKIMAGE) $(EFI_STUB) $(OUT)/vmlinuz $(OUT)/cmdline $(VERSION_FILE)
	@$(MKIMAGE) uki -stub $(EFI_STUB) -kernel $(OUT)/vmlinuz -initramfs $(filter %initramfs.img,$^) \
	  -cmdline $(OUT)/cmdline -release "$(KREL)" -version "$$(cat $(VERSION_FILE))" $(PCR_KEY_FLAGS) -o $@.unsigned
	@$(sign-uki)

$(OUT)/cairn.efi $(OUT)/null.efi: $(SECUREBOOT_KEY) $(SECUREBOOT_CERT) $(PCR_KEY)
$(OUT)/cairn.efi: $(OUT)/initramfs.img
$(OUT)/null.efi: $(OUT)/null-initramfs.img

$(OUT)/cairn.img $(OUT)/null.img: $(OUT)/%.img: $(MKIMAGE) $(OUT)/%.efi
	@$(MKIMAGE) disk -uki $(OUT)/$*.efi $(addprefix -system ,$(filter %system.img,$^)) -o $@

$(OUT)/cairn.img: $(OUT)/system.img

# The signed release artifact (pkg/release, build/release) of the image:
# out/release.oci.tar, an OCI image layout holding the release manifest
# (metadata, UKI, system image) and its signature, and out/release.pub,
# the public key that later steps make clusters trust. RELEASE_KEY is made
# on first use; the development key lives in the git-ignored .cache, so it
# never enters the repository. It reads the image's outputs, never
# rebuilds them when they are current.
RELEASE_KEY ?= .cache/release/dev-release.key
release: $(OUT)/release.oci.tar

$(RELEASE_KEY): | $(RELEASE_TOOL)
	@$(RELEASE_TOOL) -genkey -key $@ >/dev/null

$(OUT)/release.oci.tar $(OUT)/release.pub &: $(RELEASE_TOOL) $(RELEASE_KEY) $(OUT)/cairn.efi $(OUT)/system.img $(OUT)/cmdline $(VERSION_FILE) $(KUBE_STAMP)
	@$(RELEASE_TOOL) -key $(RELEASE_KEY) -uki $(OUT)/cairn.efi -system $(OUT)/system.img -cmdline $(OUT)/cmdline \
	  -version-file $(VERSION_FILE) -pub $(OUT)/release.pub -o $(OUT)/release.oci.tar \
	  $(if $(KUBE_ON),-kubernetes-version "$$(cd build/kubernetes && $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes)")

# The unified kernel images of the OS-update suites (test/e2e), in
# out/test-ukis: cairn-1.0.0.efi and cairn-1.1.0.efi are out/cairn.efi but
# for the version stamped into /init and .osrel; cairn-panic.efi is the
# 1.0.0 one with a command line on which the kernel panics before /init
# can run. All three carry the image's vmlinuz, kernel modules and
# out/cmdline, so the image's out/system.img verifies under them. They are
# made from those pieces, and no rule here is a prerequisite of the
# image's. Each /init differs from the image's in its -X flag alone, so Go
# links it from the build cache without compiling a package again.
#
# Why cairn-panic.efi panics: its command line is out/cmdline with an
# rdinit= that names no file of the initramfs. The kernel then does not
# run the initramfs at all but looks for a root device to mount, and the
# command line names none, so it panics ("VFS: Unable to mount root fs");
# panic=-1 resets the machine at once, which ends qemu under -no-reboot.
#
# cairn-hang.efi is the test image's initramfs (the /init with test hooks)
# with cairn.test.starve-watchdog on its command line: its PID 1 arms the
# hardware watchdog, never feeds it and freezes the core, so the machine
# hangs and is reset as a hung one would be. cairn-unhealthy.efi is the
# same initramfs with cairn.test.hold-curator-port: a test service holds
# the curator's port from the start, so the node boots and enrols but its
# curator never serves, and a trial boot never proves itself healthy.
# cairn-unseal-again.efi, with cairn.test.unseal-again, unseals the sealed
# configuration a second time once enrolment has ended unsealing for the
# boot, and says whether the TPM refused.
#
# test-ukis prints how long its own steps took, from the first one that
# ran; the image's steps before it are the image's cost. A step notes the
# start in TEST_UKI_RUN once per make run, keyed by make's process ID
# (the recipe shell's $PPID), so that a run cut short leaves nothing that
# a later one would count.
TEST_UKIS := $(OUT)/test-ukis
TEST_UKI_CACHE := $(IMAGE_CACHE)/test-ukis
TEST_UKI_VERSIONS := 1.0.0 1.1.0
TEST_UKI_HOOKED := hang unhealthy unseal-again
TEST_UKI_FILES := $(TEST_UKI_VERSIONS:%=$(TEST_UKIS)/cairn-%.efi) $(TEST_UKIS)/cairn-panic.efi $(TEST_UKI_HOOKED:%=$(TEST_UKIS)/cairn-%.efi) \
	$(TEST_UKIS)/cairn-cmdline.efi $(TEST_UKIS)/cairn-rotate.efi $(TEST_UKIS)/cairn-rotated.efi
TEST_UKI_RUN := $(TEST_UKI_CACHE)/run
$(TEST_UKI_FILES): $(PCR_KEY) $(SECUREBOOT_KEY) $(SECUREBOOT_CERT)
test-uki-step = mkdir -p $(TEST_UKI_CACHE) && \
	{ grep -qs "^$$PPID start " $(TEST_UKI_RUN) || echo "$$PPID start $$(date +%s)" >$(TEST_UKI_RUN); }
# test-uki makes $@ as out/cairn.efi is made, from the initramfs $(1) and
# the command line file $(2), with the version $(3), its PCR 11 signed by
# the PCR key (or the -pcr-key flags $(4)), and signed for Secure Boot, so
# that updates are tested under it too.
test-uki = mkdir -p $(@D) && $(MKIMAGE) uki -stub $(EFI_STUB) -kernel $(OUT)/vmlinuz -initramfs $(1) \
	-cmdline $(2) -release "$(KREL)" -version $(3) $(or $(4),-pcr-key $(PCR_KEY)) -o $@.unsigned && $(sign-uki) && \
	echo "$$PPID built $@" >>$(TEST_UKI_RUN)

.PHONY: test-ukis
test-ukis: $(TEST_UKI_FILES)
	@set -- $$(grep -s "^$$PPID start " $(TEST_UKI_RUN)); \
	  if [ $$# -eq 3 ]; then \
	  echo "test-ukis: built $$(grep -c "^$$PPID built " $(TEST_UKI_RUN)) of $(words $^) UKIs in $$(( $$(date +%s) - $$3 )) s"; \
	  else echo "test-ukis: the $(words $^) UKIs are up to date"; fi

$(TEST_UKI_VERSIONS:%=$(TEST_UKI_CACHE)/init-%): $(TEST_UKI_CACHE)/init-%: $(NODE_GO) go.mod go.sum
	@$(test-uki-step) && echo "test-ukis: building /init $*" && \
	  CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.buildVersion=$*" -o $@ ./cmd/init

$(TEST_UKI_VERSIONS:%=$(TEST_UKI_CACHE)/initramfs-%.img): $(TEST_UKI_CACHE)/initramfs-%.img: \
	  $(MKIMAGE) $(KERNEL_VERSION) $(TEST_UKI_CACHE)/init-%
	@$(test-uki-step) && $(MKIMAGE) initramfs -kernel "$(KDIR)" -release "$(KREL)" -init $(TEST_UKI_CACHE)/init-$* \
	  -name "initramfs $*" -o $@

$(TEST_UKI_CACHE)/cmdline-panic: $(OUT)/cmdline
	@$(test-uki-step) && echo "$$(cat $<) rdinit=/cairn-test-no-such-init" >$@

# The image's pieces come first, so that a serial make has made them
# before the first step of test-ukis starts its clock.
$(TEST_UKI_VERSIONS:%=$(TEST_UKIS)/cairn-%.efi): $(TEST_UKIS)/cairn-%.efi: \
	  $(MKIMAGE) $(EFI_STUB) $(OUT)/vmlinuz $(OUT)/cmdline $(TEST_UKI_CACHE)/initramfs-%.img
	@$(test-uki-step) && $(call test-uki,$(TEST_UKI_CACHE)/initramfs-$*.img,$(OUT)/cmdline,$*)

$(TEST_UKIS)/cairn-panic.efi: $(MKIMAGE) $(EFI_STUB) $(OUT)/vmlinuz \
	  $(TEST_UKI_CACHE)/cmdline-panic $(TEST_UKI_CACHE)/initramfs-1.0.0.img
	@$(test-uki-step) && $(call test-uki,$(TEST_UKI_CACHE)/initramfs-1.0.0.img,$(TEST_UKI_CACHE)/cmdline-panic,1.0.0)

# cairn-cmdline.efi is out/cairn.efi with cairn.system=a added to its
# command line, signed for Secure Boot, but carrying out/cairn.efi's PCR
# signature: what someone with the Secure Boot key and without the PCR key
# could boot. Its PCR 11 is no value the PCR key signed, so a seal bound
# to that key does not open under it.
$(TEST_UKI_CACHE)/cmdline-changed: $(OUT)/cmdline
	@$(test-uki-step) && echo "$$(cat $<) cairn.system=a" >$@

$(TEST_UKIS)/cairn-cmdline.efi: $(MKIMAGE) $(EFI_STUB) $(OUT)/vmlinuz $(VERSION_FILE) $(OUT)/initramfs.img \
	  $(OUT)/cairn.efi $(TEST_UKI_CACHE)/cmdline-changed
	@$(test-uki-step) && mkdir -p $(@D) && $(MKIMAGE) uki -stub $(EFI_STUB) -kernel $(OUT)/vmlinuz -initramfs $(OUT)/initramfs.img \
	  -cmdline $(TEST_UKI_CACHE)/cmdline-changed -release "$(KREL)" -version "$$(cat $(VERSION_FILE))" \
	  -pcr-sections-from $(OUT)/cairn.efi -o $@.unsigned && $(sign-uki) && echo "$$PPID built $@" >>$(TEST_UKI_RUN)

# A rotation of the PCR key, from the build's to TEST_PCR_KEY:
# cairn-rotate.efi is cairn-1.0.0.efi with TEST_PCR_KEY as its own and the
# signatures of both keys, cairn-rotated.efi is cairn-1.1.0.efi signed by
# TEST_PCR_KEY alone.
TEST_PCR_KEY := .cache/release/test-pcr-2.key
$(TEST_UKIS)/cairn-rotate.efi $(TEST_UKIS)/cairn-rotated.efi: $(TEST_PCR_KEY)
$(TEST_UKIS)/cairn-rotate.efi: $(MKIMAGE) $(EFI_STUB) $(OUT)/vmlinuz $(OUT)/cmdline $(TEST_UKI_CACHE)/initramfs-1.0.0.img
	@$(test-uki-step) && $(call test-uki,$(TEST_UKI_CACHE)/initramfs-1.0.0.img,$(OUT)/cmdline,1.0.0,-pcr-key $(TEST_PCR_KEY) -pcr-key $(PCR_KEY))
$(TEST_UKIS)/cairn-rotated.efi: $(MKIMAGE) $(EFI_STUB) $(OUT)/vmlinuz $(OUT)/cmdline $(TEST_UKI_CACHE)/initramfs-1.1.0.img
	@$(test-uki-step) && $(call test-uki,$(TEST_UKI_CACHE)/initramfs-1.1.0.img,$(OUT)/cmdline,1.1.0,-pcr-key $(TEST_PCR_KEY))

# The UKIs of the test initramfs: out/cmdline and the test hook of each.
test-uki-hook-hang := cairn.test.starve-watchdog
test-uki-hook-unhealthy := cairn.test.hold-curator-port
test-uki-hook-unseal-again := cairn.test.unseal-again
$(TEST_UKI_HOOKED:%=$(TEST_UKI_CACHE)/cmdline-%): $(TEST_UKI_CACHE)/cmdline-%: $(OUT)/cmdline
	@$(test-uki-step) && echo "$$(cat $<) $(test-uki-hook-$*)" >$@

$(TEST_UKI_HOOKED:%=$(TEST_UKIS)/cairn-%.efi): $(TEST_UKIS)/cairn-%.efi: $(MKIMAGE) $(EFI_STUB) $(OUT)/vmlinuz $(VERSION_FILE) \
	  $(TEST_UKI_CACHE)/cmdline-% $(OUT)/initramfs-test.img
	@$(test-uki-step) && $(call test-uki,$(OUT)/initramfs-test.img,$(TEST_UKI_CACHE)/cmdline-$*,$$(cat $(VERSION_FILE)))

# The Kubernetes payload of the system image (build/kubernetes), built from
# source through the module proxy: hyperkube (apiserver, controller manager,
# scheduler, proxy) and its worker build (kubelet, proxy, in worker/), with
# a link per component, containerd and its shim, runc with seccomp and the
# CNI plugins, into out/kubernetes/bin;
# the pause image every pod's sandbox runs (build/pauseimage), and kubectl
# for the host's tests into out/kubectl. Go's build cache makes a second
# run cheap, so it always runs.
.PHONY: kube-payload kube-payload-test deps-kubernetes

deps-kubernetes:
	@./build/deps.sh kubernetes

kube-payload: deps-kubernetes
	@GO=$(GO) build/kubernetes/build.sh $(KUBE_BIN) $(OUT)/kubectl
	@$(GO) run ./build/pauseimage -out $(OUT)/kubernetes/pause.oci.tar.new && \
	  { cmp -s $(OUT)/kubernetes/pause.oci.tar.new $(KUBE_BIN)/pause.oci.tar && rm $(OUT)/kubernetes/pause.oci.tar.new || \
	    mv -f $(OUT)/kubernetes/pause.oci.tar.new $(KUBE_BIN)/pause.oci.tar; }

# kube-payload-test runs every built program and checks that it is the
# release it claims (build/kubernetes/payload_test.go).
kube-payload-test: kube-payload
	cd build/kubernetes && $(GO) test -tags payload -count=1 -v . \
	  -bin $(abspath $(KUBE_BIN)) -kubectl $(abspath $(OUT))/kubectl

# conformance runs the [Conformance] tests of Kubernetes' own e2e suite,
# e2e.test built from the payload's release, against the cluster of
# CONFORMANCE_KUBECONFIG: by default make cluster's, so start make cluster
# in another terminal first. test/conformance runs it in shards, one per
# SIG and then the serial tests, two at a time; SHARDS=network,apps picks
# some; FOCUS=REGEXP runs only the conformance tests whose names match,
# as the shard focus, or with SHARDS only those shards' tests whose names
# match, as the shards focus-SHARD. Each shard's log and JUnit report stay in out/conformance/SHARD,
# with out/conformance/summary.md over all; a shard that ended is not run
# again at the same version of Cairn (the one the cluster's Nodes report),
# so a run that stopped resumes where it was. First the test images the
# suite's pods run are built here (build/testimages) and pushed to the
# cluster's registry, and e2e.test is pointed at it (KUBE_TEST_REPO_LIST).
# AGAIN=1 runs the shards that are done too. BACKGROUND=1 detaches the
# run, logging to out/conformance/runner.log.
CONFORMANCE_DIR := $(OUT)/conformance
CONFORMANCE_KUBECONFIG ?= $(OUT)/cluster/kubeconfig
# Where this machine pushes the test images (build/testimages): make
# cluster's registry, which the nodes reach at 10.42.0.1:5000.
CONFORMANCE_REGISTRY ?= 127.0.0.1:5000
.PHONY: conformance
conformance: kube-payload
	@./build/deps.sh conformance
	@mkdir -p $(CONFORMANCE_DIR)
	@echo "conformance: building e2e.test (Kubernetes $$(cd build/kubernetes && $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes))"
	@GO=$(GO) build/kubernetes/build.sh -e2e $(CONFORMANCE_DIR)/e2e.test
	@$(GO) build -o $(CONFORMANCE_DIR)/runner ./test/conformance
	@$(GO) run ./build/testimages -kube build/kubernetes -push $(CONFORMANCE_REGISTRY) -repo-list $(CONFORMANCE_DIR)/repo-list.yaml
	$(CONFORMANCE_DIR)/runner -e2e $(CONFORMANCE_DIR)/e2e.test -kubeconfig $(CONFORMANCE_KUBECONFIG) -kubectl $(OUT)/kubectl \
	  -repo-list $(abspath $(CONFORMANCE_DIR))/repo-list.yaml \
	  -dir $(CONFORMANCE_DIR) $(if $(SHARDS),-shards $(SHARDS)) $(if $(FOCUS),-focus '$(FOCUS)') $(if $(filter 1,$(AGAIN)),-again) $(if $(filter 1,$(BACKGROUND)),-background)

# Protocol buffers. `make proto` regenerates the committed Go code beside the
# .proto files of proto/; `make proto-check` (part of lint) regenerates into a
# scratch directory and names every committed file that differs. protoc is
# Debian's protobuf-compiler; the Go plugins come through the Go module proxy.
# All three versions are pinned here and nowhere else: each is written into
# the generated files. protoc-gen-go matches the protobuf runtime in go.mod.
PROTOC ?= protoc
PROTOC_VERSION := 3.21.12
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PROTO_TOOLS := $(CURDIR)/.cache/bin
PROTOC_GEN_GO := $(PROTO_TOOLS)/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(PROTO_TOOLS)/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)/protoc-gen-go-grpc
PROTO_FILES = $(shell find proto -name '*.proto' | LC_ALL=C sort)
# protoc-go runs protoc over every .proto file, writing Go below $(1).
protoc-go = $(PROTOC) --proto_path=. \
	--plugin=protoc-gen-go=$(PROTOC_GEN_GO) \
	--go_out=$(1) --go_opt=paths=source_relative \
	--plugin=protoc-gen-go-grpc=$(PROTOC_GEN_GO_GRPC) \
	--go-grpc_out=$(1) --go-grpc_opt=paths=source_relative \
	$(PROTO_FILES)

.PHONY: proto-check protoc-version

$(PROTOC_GEN_GO):
	GOBIN=$(@D) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(@D) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

protoc-version: deps
	@have="$$($(PROTOC) --version)"; \
	  if [ "$$have" != "libprotoc $(PROTOC_VERSION)" ]; then \
	  echo "need protoc $(PROTOC_VERSION) (Debian protobuf-compiler), have: $$have"; exit 1; fi

proto: protoc-version $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	find proto -name '*.pb.go' -delete
	$(call protoc-go,.)

proto-check: protoc-version $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  $(call protoc-go,"$$tmp") || exit 1; \
	  stale=$$( { (cd "$$tmp" && find proto -name '*.pb.go'); find proto -name '*.pb.go'; } \
	    | LC_ALL=C sort -u | while read -r f; do cmp -s "$$tmp/$$f" "$$f" || echo "  $$f"; done ); \
	  if [ -n "$$stale" ]; then \
	  echo "generated protobuf code is stale (run make proto):"; echo "$$stale"; exit 1; fi

clean:
	rm -rf $(OUT)
