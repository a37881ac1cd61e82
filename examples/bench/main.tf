# 100 resources, no provider downloads: the benchmark of a run through Drover against the
# same terraform run bare.
variable "count_of_things" {
  type    = number
  default = 100
}

resource "terraform_data" "thing" {
  count = var.count_of_things
  input = "thing-${count.index}"
}

output "things" {
  value = length(terraform_data.thing)
}
