// Package guardconfig builds the exec guard's ValidatingWebhookConfiguration for tests that serve the webhook
// from a process on this machine (envtest, the e2e manager): the same rules as the chart's, with a URL
// instead of a Service.
package guardconfig

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ForURL is the configuration named name that sends username's CONNECT requests on pods/exec, attach,
// portforward and proxy to url, failing closed. The caller's manager injects the CA bundle.
func ForURL(name, url, username string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "exec-guard.sandbox.airlock.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Connect},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods/exec", "pods/attach", "pods/portforward", "pods/proxy"}},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "gateway-only",
				Expression: fmt.Sprintf("request.userInfo.username == '%s'", username)}},
		}},
	}
}
