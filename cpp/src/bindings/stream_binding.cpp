#include <pybind11/stl.h>

#include "bindings/bindings.h"
#include "xpuruntime/stream.h"

namespace xpuruntime::bindings {

void bind_stream(py::module_& m) {
  py::class_<Stream, std::shared_ptr<Stream>>(m, "Stream")
      .def_property_readonly("device", [](const Stream& s) { return s.device().str(); })
      .def_property_readonly("handle", [](const Stream& s) { return reinterpret_cast<uintptr_t>(s.native()); },
                             "The native stream (cudaStream_t as an integer; 0 is the default stream).")
      .def("synchronize", [](const Stream& s) {
        py::gil_scoped_release release;
        s.synchronize();
      })
      .def("query", &Stream::query)
      .def_static("wrap",
                  [](const std::string& d, uintptr_t handle) {
                    return Stream::wrap(Device::parse(d), reinterpret_cast<NativeStream>(handle));
                  },
                  py::arg("device"), py::arg("handle"), "Borrow a native stream (e.g. torch's) without owning it.")
      .def("__repr__", [](const Stream& s) {
        return "<Stream " + s.device().str() + " handle=" + std::to_string(reinterpret_cast<uintptr_t>(s.native())) + ">";
      });

  py::class_<Event, std::shared_ptr<Event>>(m, "Event")
      .def(py::init([](const std::string& d, bool timing) { return std::make_shared<Event>(Device::parse(d), timing); }),
           py::arg("device") = "cpu", py::arg("enable_timing") = true)
      .def("record", &Event::record, py::arg("stream"))
      .def("synchronize", [](const Event& e) {
        py::gil_scoped_release release;
        e.synchronize();
      })
      .def("query", &Event::query)
      .def("wait", &Event::wait, py::arg("stream"))
      .def("elapsed_time", [](const Event& end, const Event& start) { return end.elapsed_ms_since(start); },
           py::arg("start"), "Milliseconds from `start` to this event.");

  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph").def("replay", [](const Graph& g, const Stream& s) {
    py::gil_scoped_release release;
    g.replay(s);
  }, py::arg("stream"));

  py::class_<GraphCapture>(m, "GraphCapture")
      .def(py::init<std::shared_ptr<Stream>>(), py::arg("stream"))
      .def("begin", &GraphCapture::begin)
      .def("end", &GraphCapture::end)
      .def_property_readonly("capturing", &GraphCapture::capturing);

  auto sm = m.def_submodule("streams", "Streams per device.");
  sm.def("create_stream", [](const std::string& d, int priority) {
    return StreamManager::instance().create_stream(Device::parse(d), priority);
  }, py::arg("device") = "cpu", py::arg("priority") = 0);
  sm.def("default_stream", [](const std::string& d) { return StreamManager::instance().default_stream(Device::parse(d)); },
         py::arg("device") = "cpu");
  sm.def("current_stream", [](const std::string& d) { return StreamManager::instance().current_stream(Device::parse(d)); },
         py::arg("device") = "cpu");
  sm.def("set_current_stream", [](std::shared_ptr<Stream> s) { StreamManager::instance().set_current_stream(std::move(s)); },
         py::arg("stream"));
}

}  // namespace xpuruntime::bindings
