# The Drover quickstart example: runs offline, with terraform's built-in resources only.

variable "greeting" {
  type        = string
  default     = "Hello from Drover"
  description = "What the run says."
}

resource "terraform_data" "hello" {
  input = var.greeting

  provisioner "local-exec" {
    command = "echo \"$GREETING, from run $DROVER_RUN_ID on workspace $DROVER_WORKSPACE_NAME\""
    environment = {
      GREETING = var.greeting
    }
  }
}

resource "terraform_data" "token" {
  input = sha256(var.greeting)
}

output "greeting" {
  value = terraform_data.hello.output
}

output "token" {
  value     = terraform_data.token.output
  sensitive = true
}
