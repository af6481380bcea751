#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "xpuruntime/profiler.h"

namespace xpuruntime::bindings {

void bind_profiler(py::module_& m) {
  py::class_<ProfilerCounters>(m, "ProfilerCounters")
      .def_readonly("copies_h2d", &ProfilerCounters::copies_h2d)
      .def_readonly("copies_d2h", &ProfilerCounters::copies_d2h)
      .def_readonly("copies_d2d", &ProfilerCounters::copies_d2d)
      .def_readonly("copies_h2h", &ProfilerCounters::copies_h2h)
      .def_readonly("bytes_h2d", &ProfilerCounters::bytes_h2d)
      .def_readonly("bytes_d2h", &ProfilerCounters::bytes_d2h)
      .def_readonly("bytes_d2d", &ProfilerCounters::bytes_d2d)
      .def_readonly("bytes_h2h", &ProfilerCounters::bytes_h2h)
      .def_readonly("syncs", &ProfilerCounters::syncs)
      .def_readonly("allocs", &ProfilerCounters::allocs)
      .def_readonly("frees", &ProfilerCounters::frees)
      .def_readonly("alloc_bytes", &ProfilerCounters::alloc_bytes);

  py::class_<Profiler, std::unique_ptr<Profiler, py::nodelete>>(m, "Profiler")
      .def_static("instance", &Profiler::instance, py::return_value_policy::reference)
      .def("enable", &Profiler::enable)
      .def("disable", &Profiler::disable)
      .def_property_readonly("enabled", &Profiler::enabled)
      .def("push_range", &Profiler::push_range, py::arg("name"))
      .def("pop_range", &Profiler::pop_range)
      .def("instant", [](Profiler& p, const std::string& name, const std::string& cat,
                         std::map<std::string, std::string> args) { p.instant(name, cat, std::move(args)); },
           py::arg("name"), py::arg("category") = "user", py::arg("args") = std::map<std::string, std::string>{})
      .def("add_complete", &Profiler::add_complete, py::arg("name"), py::arg("category"), py::arg("start_ns"),
           py::arg("dur_ns"), py::arg("args") = std::map<std::string, std::string>{})
      .def("now_ns", &Profiler::now_ns)
      .def("counters", &Profiler::counters)
      .def("events",
           [](const Profiler& p) {
             py::list out;
             for (const auto& e : p.events())
               out.append(py::dict(py::arg("name") = e.name, py::arg("category") = e.category,
                                   py::arg("phase") = std::string(1, e.phase), py::arg("ts_ns") = e.ts_ns,
                                   py::arg("dur_ns") = e.dur_ns, py::arg("args") = e.args));
             return out;
           })
      .def("chrome_trace_json", &Profiler::chrome_trace_json)
      .def("export_chrome_trace", &Profiler::export_chrome_trace, py::arg("path"))
      .def("summary", &Profiler::summary);
}

}  // namespace xpuruntime::bindings
