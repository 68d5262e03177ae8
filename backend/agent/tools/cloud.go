package tools

import (
	"cubicle/backend/agent"
	"cubicle/backend/computer"
)

// cloudSpecs are the cloud_computer_* tools (SPEC §1.6, §7): the computer_* tools aimed at the
// agent's desktop on a cloud node, and cloud_computer_copy_file between the base node's host
// and that desktop. They run exactly as their computer_* twins; the desktop they act on is the
// one the binding gives the agent, which the backend places on the cloud node.
var cloudSpecs = cloudOf(append(append([]agent.ToolSpec{}, computerSpecs...), hostSpecs[len(hostSpecs)-1]))

func cloudOf(specs []agent.ToolSpec) []agent.ToolSpec {
	out := make([]agent.ToolSpec, 0, len(specs))
	for _, s := range specs {
		out = append(out, agent.ToolSpec{Name: "cloud_" + s.Name,
			Description: "On the agent's cloud desktop (a cloud execution node): " + s.Description, Parameters: s.Parameters})
	}
	return out
}

func init() {
	if last := cloudSpecs[len(cloudSpecs)-1].Name; last != computer.ToolCloudCopy {
		panic("tools: the cloud copy tool is " + last)
	}
}
