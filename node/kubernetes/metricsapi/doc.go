// Package metricsapi serves Kubernetes' resource metrics API,
// metrics.k8s.io/v1beta1, which kubectl top and the HorizontalPodAutoscaler
// read: the CPU and memory the nodes and the pods' containers use.
//
// A Server scrapes every kubelet's /metrics/resource (cumulative CPU time
// and working set, each stamped by the kubelet) at an interval, keeps each
// node's last two scrapes, and answers the CPU used between them and the
// last working set. It is an aggregated apiserver: the cluster's apiserver
// proxies the group's requests to it as the front proxy, naming the user
// in X-Remote-User and X-Remote-Group, and the Server believes those
// headers only with a verified certificate of the front proxy CA carrying
// one of the front proxy's names. What a user may read, an Authorizer
// decides (the apiserver, through a SubjectAccessReview); which objects a
// selector matches, a Selector (the apiserver's list).
//
//	kubelets ──/metrics/resource──▶ Scrape ──▶ store ──▶ Handler ◀── front proxy
//	                                                        │
//	                                    Authorizer, Selector (the apiserver)
//
// node/kubernetes runs one on every controller (docs/kubernetes.md).
package metricsapi
