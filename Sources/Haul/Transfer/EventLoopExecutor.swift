import NIOCore

/// Runs the jobs of the tasks that prefer it on a SwiftNIO event loop: each transfer's task runs on one of the HTTP
/// client's loops, beside its connection (``TransferManager``).
///
/// The client completes a response's head and end on the connection's loop; a task waiting for them on the
/// cooperative threads had to be woken there for each (a futex wake-up, and the loop woken back for the next
/// request), and the client's async API spawns a task of its own per request. On its loop the resumption is a job
/// queued on the same thread. 2,000 files of 16 KiB, 12 interleaved rounds on tmpfs (`Benchmarks/peers/commands.py`),
/// with the body written on the loop (``ResponseStream``): 177 → 154 ms (state on), 143 → 127 ms (without it),
/// context switches 3,900 → 1,500; either change alone gained nothing.
///
/// What a transfer does between its awaits (opening and renaming its file, writing what arrived, hashing, the
/// caller's hooks) runs on the loop, between the loop's other I/O, as in single-threaded downloaders.
@available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
final class EventLoopExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.eventLoop.execute {
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
