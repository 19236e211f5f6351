package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"airlock.dev/airlock/internal/doctor"
	"airlock.dev/airlock/internal/version"
)

func newDoctorCmd(s streams) *cobra.Command {
	k := &kubeFlags{}
	var (
		installNamespace, probeNamespace, runtimeClass, initImage string
		probe                                                     bool
		timeout                                                   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Tell what the cluster has and lacks for Airlock, and what to set",
		Long: `doctor reads the cluster (Kubernetes version, image volumes, MutatingAdmissionPolicy, nodes, RuntimeClasses,
an installed manager and the registry its images come from) and runs a probe pod: airlock-init's own gate, as
every sandbox's PID 1 runs it, behind a deny-all NetworkPolicy, under the isolating RuntimeClass. Its gate passes
only where a NetworkPolicy enforcer blocks the node's kubelet port, and its attestation says how the runtime's
isolation was proven (gVisor's marker or kernel log, a VM's own kernel) or that nothing proved it. The probe's
pod, policy and namespace are deleted before doctor ends. It exits 1 when something is missing.`,
		Example: `  airlock doctor
  airlock doctor --namespace team-a --runtime-class gvisor
  airlock doctor --probe=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := k.restConfig()
			if err != nil {
				return err
			}
			c, err := k.client()
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("kubernetes client: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout+adminTimeout)
			defer cancel()
			facts, err := doctor.Gather(ctx, c, cs.Discovery(), installNamespace)
			if err != nil {
				return err
			}
			settings := doctor.SettingsOf(facts, version.InitImage())
			if initImage != "" {
				settings.InitImage = initImage
			}
			if probe {
				o := doctor.PlanProbe(facts, settings, runtimeClass, doctor.ProbeOptions{Namespace: probeNamespace, Image: settings.InitImage, Timeout: timeout})
				fmt.Fprintf(s.errOut, "probing with a pod of %s under %s in %s (up to %s)...\n", o.Image, orDefaultRuntime(o.RuntimeClass), orNewNamespace(o.Namespace), timeout)
				if facts.Probe, err = doctor.Probe(ctx, c, cs, o); err != nil {
					return err
				}
			}
			missing, err := doctor.Report(s.out, cfg.Host, doctor.Judge(facts, settings))
			if err != nil {
				return err
			}
			if missing > 0 {
				return exitCode{exitError}
			}
			return nil
		},
	}
	k.register(cmd)
	f := cmd.Flags()
	f.StringVar(&installNamespace, "install-namespace", "airlock-system", "namespace of an Airlock install, whose manager's settings and images are judged")
	f.BoolVar(&probe, "probe", true, "run the probe pod (needs pods and NetworkPolicies in --namespace, or a namespace it creates)")
	f.StringVar(&probeNamespace, "namespace", "", "existing namespace for the probe (default: a new airlock-doctor-* namespace, deleted afterwards)")
	f.StringVar(&runtimeClass, "runtime-class", "", "RuntimeClass of the probe (default: the manager's default class if it exists, else the first isolating one)")
	f.StringVar(&initImage, "init-image", "", "image holding airlock-init for the probe (default: the installed manager's --init-image, else this release's)")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long the probe may take, its image pull included")
	return cmd
}

func orDefaultRuntime(class string) string {
	if class == "" {
		return "the default runtime"
	}
	return "RuntimeClass " + class
}

func orNewNamespace(ns string) string {
	if ns == "" {
		return "a new namespace"
	}
	return "namespace " + ns
}
