// The AgentTask CustomResourceDefinition, as deploy/kubernetes/agenttasks.drover.dev.yaml has it
// (the charts install that file; deploy/pulumi/test/agent.test.ts checks the two agree). A copy,
// because a published component cannot read files of this repository at run time.

/** The AgentTask CRD (drover.dev/v1alpha1). */
export const agentTaskCrd = {
  apiVersion: "apiextensions.k8s.io/v1",
  kind: "CustomResourceDefinition",
  metadata: {
    name: "agenttasks.drover.dev",
  },
  spec: {
    group: "drover.dev",
    scope: "Namespaced",
    names: {
      kind: "AgentTask",
      listKind: "AgentTaskList",
      plural: "agenttasks",
      singular: "agenttask",
      shortNames: ["atask"],
    },
    versions: [
      {
        name: "v1alpha1",
        served: true,
        storage: true,
        subresources: {
          status: {},
        },
        additionalPrinterColumns: [
          {
            name: "Valid",
            type: "string",
            jsonPath: '.status.conditions[?(@.type=="Valid")].status',
          },
          {
            name: "Age",
            type: "date",
            jsonPath: ".metadata.creationTimestamp",
          },
        ],
        schema: {
          openAPIV3Schema: {
            type: "object",
            description: "A template for the Kubernetes Jobs that run Drover jobs.",
            required: ["spec"],
            properties: {
              apiVersion: {
                type: "string",
              },
              kind: {
                type: "string",
              },
              metadata: {
                type: "object",
              },
              spec: {
                type: "object",
                required: ["jobTemplate"],
                properties: {
                  jobTemplate: {
                    type: "object",
                    description:
                      "A batch/v1 JobSpec. The controller adds labels, volumes, the exec-loop init container, backoffLimit 0 and restartPolicy Never.",
                    required: ["template"],
                    properties: {
                      activeDeadlineSeconds: {
                        type: "integer",
                        minimum: 1,
                      },
                      ttlSecondsAfterFinished: {
                        type: "integer",
                        minimum: 0,
                      },
                      backoffLimit: {
                        type: "integer",
                        minimum: 0,
                        maximum: 0,
                      },
                      template: {
                        type: "object",
                        description:
                          'A PodTemplateSpec; containers named "worker" and "runner" are completed by the controller.',
                        "x-kubernetes-preserve-unknown-fields": true,
                      },
                    },
                    "x-kubernetes-preserve-unknown-fields": true,
                  },
                },
              },
              status: {
                type: "object",
                properties: {
                  observedGeneration: {
                    type: "integer",
                  },
                  conditions: {
                    type: "array",
                    items: {
                      type: "object",
                      required: ["type", "status"],
                      properties: {
                        type: {
                          type: "string",
                        },
                        status: {
                          type: "string",
                          enum: ["True", "False", "Unknown"],
                        },
                        reason: {
                          type: "string",
                        },
                        message: {
                          type: "string",
                        },
                        lastTransitionTime: {
                          type: "string",
                          format: "date-time",
                        },
                      },
                    },
                  },
                },
              },
            },
          },
        },
      },
    ],
  },
};
