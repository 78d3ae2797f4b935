/* stretches.c SERIES RUNS CPU: pinned to CPU, SERIES times (200 ms apart) a
 * series of RUNS timed runs of a loop of 1000000 multiply-adds, each run's
 * µs printed, a line a series. gcc -O1 -o stretches stretches.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sched.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){
  int reps=atoi(v[1]), chunks=atoi(v[2]); int cpu=atoi(v[3]);
  cpu_set_t s;CPU_ZERO(&s);CPU_SET(cpu,&s);sched_setaffinity(0,sizeof s,&s);
  for(int r=0;r<reps;r++){
    volatile unsigned long x=0; double t0=now();
    for(int k=0;k<chunks;k++){ double a=now(); for(unsigned long i=0;i<1000000;i++) x+=i*i; double b=now(); printf("%.0f ", (b-a)*1e6);}
    printf("\n");
    struct timespec ts={0,200000000}; nanosleep(&ts,0);
  }
}
